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
