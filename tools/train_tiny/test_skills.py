"""Tests of the training data's count helpers (run by scripts/test: `python -m pytest tools/train_tiny`)."""

import json
import random

import skills


def random_counts(rng, n):
    """Counts as training draws them, short and long, every kind, on and off the step's grid."""
    return [skills.count_case(rng, i % 2 == 0, kinds=(1, 1, 1, 1), off_grid=0.5) for i in range(n)]


def test_count_ends_reads_the_start_and_end_every_template_names():
    rng = random.Random(7)
    for q, nums in random_counts(rng, 400):
        a, b = skills.count_ends(q)
        s = nums[1] - nums[0] if len(nums) > 1 else 1
        assert a == nums[0], q
        assert skills.count_numbers(a, b, s) == nums, q


def test_a_count_near_keeps_the_step_the_end_s_offset_and_the_start_s_digits():
    rng = random.Random(11)
    for q, nums in random_counts(rng, 300):
        if len(nums) < 2:
            continue
        s = nums[1] - nums[0]
        _, b = skills.count_ends(q)
        q2, nums2 = skills.count_near(rng, q, nums)
        a2, b2 = skills.count_ends(q2)
        assert nums2 == skills.count_numbers(a2, b2, s), (q, q2)
        assert nums2[1] - nums2[0] == s, (q, q2)
        assert b2 - nums2[-1] == b - nums[-1], (q, q2)
        assert min(nums2) >= 0 and min(b2, a2) >= 0, (q, q2)
        assert 0.75 * len(nums) - 1 <= len(nums2) <= 1.3 * len(nums) + 1 or len(nums) <= 3, (q, q2)
        if s > 0 or len(str(nums2[0])) == len(str(nums[0])):
            assert len(str(nums2[0])) == len(str(nums[0])), (q, q2)
        assert not skills.held_out(skills.count_key(q2)), q2


def test_replays_draw_the_mined_cases_or_counts_like_them(tmp_path):
    rng = random.Random(3)
    mined = random_counts(rng, 20)
    path = tmp_path / "mined.json"
    path.write_text(json.dumps({"failed": [{"prompt": q, "numbers": n} for q, n in mined]}))
    loaded = skills.load_mined(str(path))
    assert loaded == [(q, n) for q, n in mined if not skills.held_out(skills.count_key(q))]
    asked = {q for q, _ in loaded}
    same = near = 0
    for _ in range(400):
        convo = skills.gen_count_replay(rng, loaded, near_frac=0.5)
        same += any(q in convo for q in asked)
        near += not any(q in convo for q in asked)
    assert 120 < same < 280 and 120 < near < 280, (same, near)


def test_a_distractor_looks_like_the_end_without_being_it():
    assert skills.count_distractor(5299, 5399)  # the last two digits
    assert skills.count_distractor(10701, 10710)  # the same digits
    assert skills.count_distractor(5548, 5558)  # one digit
    assert not skills.count_distractor(5399, 5399)
    assert not skills.count_distractor(999, 1099)  # not as many digits
    assert skills.count_distractor(47, 57)  # two digits: one differs
    assert not skills.count_distractor(4, 0)  # one digit: none
    assert not skills.count_distractor(5212, 5399)
    # a step that repeats the end's last two digits on every few numbers: they say nothing there
    assert skills.count_distractor(5299, 5399, step=2)
    assert not skills.count_distractor(4999, 5399, step=100)
    assert skills.count_distractor(4999, 5399, step=1)
    assert not skills.count_distractor(5149, 5399, step=50)
    assert skills.count_distractor(5389, 5399, step=100)  # one digit still


# Token ids for the distractor test: digits 10..19 are "0".."9", the rest markers.
USER, ASSISTANT, IM_END, NEWLINE, WORD = [1, 5], [1, 6], 2, 3, 4
DIGIT_OF = {10 + d: d for d in range(10)}


def tokens(text):
    return [10 + int(c) if c.isdigit() else NEWLINE if c == "\n" else WORD for c in text]


def number_before(ids, q):
    """The number whose digits end at place q."""
    p = q
    while p > 0 and ids[p - 1] in DIGIT_OF:
        p -= 1
    return int("".join(str(DIGIT_OF[t]) for t in ids[p:q]))


def counts_of(ids):
    return skills.count_turns(ids, USER, ASSISTANT, IM_END, NEWLINE, DIGIT_OF)


def chat(prompt, reply):
    return USER + tokens(prompt) + [IM_END, NEWLINE] + ASSISTANT + tokens(reply) + [IM_END, NEWLINE]


def test_distractor_decisions_are_the_newlines_after_numbers_like_the_end():
    nums = list(range(5290, 5400))
    ids = chat("Count from 5290 to 5399.", "\n".join(map(str, nums)))
    at = skills.distractor_decisions(counts_of(ids), 5)
    assert at, "5299, 5309, 5319, ... look like 5399"
    assert all(ids[q] == NEWLINE for q in at)
    marked = [number_before(ids, q) for q in at]
    assert marked == [n for n in nums[:-6] if skills.count_distractor(n, 5399)]
    assert 5299 in marked and 5389 in marked and 5301 not in marked
    assert 5394 not in marked and 5399 not in marked  # the near-stop window's, and the stop
    assert len(skills.distractor_decisions(counts_of(ids), 0)) == len(at) + 5


def test_distractor_decisions_skip_replies_that_are_not_the_count_asked():
    # the reply does not start at the prompt's first number: an arithmetic answer or a list
    ids = chat("What is 12 + 5?", "17\n15")
    assert skills.distractor_decisions(counts_of(ids), 5) == []
    # one number: no go-on decision
    ids = chat("Count from 5 to 5.", "5")
    assert skills.distractor_decisions(counts_of(ids), 5) == []
    # "Count to 120": the end is the only number named, the start 1
    ids = chat("Count to 120.", "\n".join(map(str, range(1, 121))))
    at = skills.distractor_decisions(counts_of(ids), 5)
    assert len(at) == sum(skills.count_distractor(n, 120) for n in range(1, 115)) > 0
    # a one-digit end: none
    ids = chat("Count down from 9 to 0.", "\n".join(map(str, range(9, -1, -1))))
    assert skills.distractor_decisions(counts_of(ids), 0) == []


def test_off_grid_end_decisions_are_the_last_go_on_and_the_stop():
    nums = skills.count_numbers(478, 784, 7)
    ids = chat("Count from 478 to 784 counting by 7s.", "\n".join(map(str, nums)))
    at = skills.off_grid_end_decisions(counts_of(ids), ids, IM_END)
    assert len(at) == 2 and ids[at[0]] == NEWLINE and ids[at[1]] == IM_END, at
    # the go-on follows 772 (the number before the last, 779), the stop follows 779
    assert [number_before(ids, q) for q in at] == [772, 779]
    # an end on the grid, or a count cut before its stop: none
    ids = chat("Count from 478 to 779 counting by 7s.", "\n".join(map(str, skills.count_numbers(478, 779, 7))))
    assert skills.off_grid_end_decisions(counts_of(ids), ids, IM_END) == []
    cut = chat("Count from 478 to 784 counting by 7s.", "\n".join(map(str, nums)))[:-2]
    assert skills.off_grid_end_decisions(counts_of(cut), cut, IM_END) == []
    # down, off the grid: 50 to 3 by 5 ends at 5
    ids = chat("Count down from 50 to 3 in steps of 5.", "\n".join(map(str, skills.count_numbers(50, 3, -5))))
    at = skills.off_grid_end_decisions(counts_of(ids), ids, IM_END)
    assert [number_before(ids, q) for q in at] == [10, 5]
