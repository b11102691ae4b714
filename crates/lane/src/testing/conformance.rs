//! What every [`Target`] must do, as checks any backend runs on its own target: the fake here,
//! `CpuTarget` in backend-cpu's tests, `CudaTarget` in backend-cuda's GPU tests. Each check
//! builds fresh targets through the backend's factory and panics naming the check and the round
//! where a target departs from the contract of [`crate::target`]:
//! - a stream's logits are the same bits alone and in a batch beside other sessions' prompt
//!   chunks and rolled-back multi-token windows, in any window order;
//! - a stream moved into a larger session midway continues bit for bit, and a move that fails
//!   changes nothing;
//! - a window rolled back to its first token continues as if only that token had been written;
//! - a released session serves its next stream as a fresh one;
//! - a round the engine would never send (a window that does not start where its session ends,
//!   one past its capacity, two windows of one session, a token outside the vocabulary) is
//!   refused before any state changes;
//! - with a drafter, each session's drafts are the same asked alone or beside others;
//! - a sampled stream's draws ([`Want::Draw`]) are the same tokens alone and beside greedy,
//!   logits and prompt windows, in any order, and a top-k 1 draw is the greedy token;
//! - with a prompt cache, blocks restored into another session continue bit for bit.

use crate::sampling::{mix64, Distribution, Rng};
use crate::target::{DraftAsk, DrawAsk, Target, TargetExt, Want, Window, WindowRows};
use slots::SessionId;

/// Decode steps each check runs after its prompt.
const STEPS: usize = 6;
/// Tokens of the main stream's prompt: two prefill windows of 20.
const PROMPT: usize = 40;
/// Every target a check builds has these sessions: three alike, and a larger one to move into.
pub const CAPACITIES: [u64; 4] = [128, 128, 128, 256];

/// A deterministic prompt of `n` ids below `vocab` (a linear congruential walk from `seed`).
pub fn prompt(seed: u32, n: usize, vocab: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 8) % vocab as u32
        })
        .collect()
}

fn window(session: usize, start: u64, tokens: &[u32], num_logits: usize) -> Window<'_> {
    Window::new(SessionId(session), start, tokens, num_logits)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn argmax(row: &[f32]) -> u32 {
    crate::sampling::argmax(row).expect("a finite logit")
}

/// The main stream alone in session `session` of a fresh target: its prompt in two chunks, then
/// greedy decode steps; each step's logits row.
fn alone<T: Target>(make: &mut dyn FnMut(&[u64]) -> T, session: usize) -> Vec<Vec<f32>> {
    let mut t = make(&CAPACITIES);
    let vocab = t.vocab_size();
    let p = prompt(1, PROMPT, vocab);
    t.logits(&[window(session, 0, &p[..20], 0)])
        .expect("first chunk");
    let mut rows = vec![t
        .logits(&[window(session, 20, &p[20..], 1)])
        .expect("second chunk")
        .remove(0)];
    for i in 0..STEPS - 1 {
        let token = [argmax(&rows[i])];
        let pos = (PROMPT + i) as u64;
        rows.push(
            t.logits(&[window(session, pos, &token, 1)])
                .expect("decode")
                .remove(0),
        );
    }
    rows
}

fn assert_rows(name: &str, want: &[Vec<f32>], got: &[Vec<f32>]) {
    assert_eq!(want.len(), got.len(), "{name}: steps");
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        assert!(
            same_bits(w, g),
            "{name}: step {i} differs from the stream alone"
        );
    }
}

/// The stream of [`alone`] in session 0, each round beside session 1's prompt chunk or a
/// 3-token window rolled back to its first token, and session 2 restarted, windows in turning
/// order.
pub fn alone_equals_batched<T: Target>(make: &mut Factory<'_, T>) {
    let want = alone(make, 0);
    let mut t = make(&CAPACITIES);
    let vocab = t.vocab_size();
    let (p, other) = (prompt(1, PROMPT, vocab), prompt(2, 24, vocab));
    t.logits(&[window(1, 0, &other[..8], 0), window(0, 0, &p[..20], 0)])
        .expect("first chunks");
    let mut rows = t
        .logits(&[window(0, 20, &p[20..], 1), window(1, 8, &other[8..], 2)])
        .expect("second chunks");
    let mut got = vec![rows.remove(0)];
    for i in 0..STEPS - 1 {
        let token = [argmax(&got[i])];
        let pos = (PROMPT + i) as u64;
        let other_len = (24 + i) as u64;
        let mine = window(0, pos, &token, 1);
        let drafts = window(1, other_len, &other[..3], 3);
        let restart = window(2, 0, &other[i..i + 10], 1);
        let round = match i % 3 {
            0 => vec![mine, drafts, restart],
            1 => vec![drafts, restart, mine],
            _ => vec![restart, mine, drafts],
        };
        let place = round.iter().position(|w| w.session.0 == 0).expect("mine");
        let mut rows = t.logits(&round).expect("batched round");
        got.push(rows.swap_remove(place));
        t.truncate(SessionId(1), other_len + 1)
            .expect("roll the 3-token window back");
        t.release(SessionId(2));
    }
    assert_rows("alone = batched", &want, &got);
}

/// The stream of [`alone`] moved from session 0 into the larger session 3 after its prompt, and
/// a failed move (into a session too small, or onto itself) leaving it as it was.
pub fn moved_equals_unmoved<T: Target>(make: &mut Factory<'_, T>) {
    let want = alone(make, 0);
    let mut t = make(&CAPACITIES);
    let vocab = t.vocab_size();
    let p = prompt(1, PROMPT, vocab);
    t.logits(&[window(0, 0, &p[..20], 0)]).expect("first chunk");
    let mut got = vec![t
        .logits(&[window(0, 20, &p[20..], 1)])
        .expect("second chunk")
        .remove(0)];
    assert!(
        t.move_state(SessionId(0), SessionId(0)).is_err(),
        "a move onto itself is refused"
    );
    t.move_state(SessionId(0), SessionId(3)).expect("move");
    for i in 0..STEPS - 1 {
        let token = [argmax(&got[i])];
        let pos = (PROMPT + i) as u64;
        got.push(
            t.logits(&[window(3, pos, &token, 1)])
                .expect("decode after the move")
                .remove(0),
        );
    }
    assert_rows("alone = moved", &want, &got);
    // The freed session serves a new stream as a fresh one.
    t.logits(&[window(0, 0, &p[..20], 0)])
        .expect("reuse, first chunk");
    let reused = t
        .logits(&[window(0, 20, &p[20..], 1)])
        .expect("reuse, second chunk");
    assert_rows("released after a move", &want[..1], &reused);
}

/// A 3-token window rolled back to its first token, then decoding on, equals writing that one
/// token; a stream released midway and started again equals a fresh one.
pub fn rollback_and_release<T: Target>(make: &mut Factory<'_, T>) {
    let want = alone(make, 1);
    let mut t = make(&CAPACITIES);
    let vocab = t.vocab_size();
    let p = prompt(1, PROMPT, vocab);
    // A stream that ends midway, in the same session first.
    t.logits(&[window(1, 0, &prompt(3, 30, vocab), 1)])
        .expect("a stream to release");
    t.release(SessionId(1));
    t.logits(&[window(1, 0, &p[..20], 0)]).expect("first chunk");
    let mut got = vec![t
        .logits(&[window(1, 20, &p[20..], 1)])
        .expect("second chunk")
        .remove(0)];
    for i in 0..STEPS - 1 {
        let next = argmax(&got[i]);
        let pos = (PROMPT + i) as u64;
        // The sampled token and two drafts of which none is kept.
        let window_tokens = [next, (next + 1) % vocab as u32, (next + 2) % vocab as u32];
        let rows = t
            .logits(&[window(1, pos, &window_tokens, 3)])
            .expect("a window with drafts")
            .remove(0);
        got.push(rows[..vocab].to_vec());
        t.truncate(SessionId(1), pos + 1).expect("rollback");
    }
    assert_rows("rolled back = never written", &want, &got);
}

/// Rounds the engine never sends are refused, and the target is left as before them.
pub fn bad_rounds_change_nothing<T: Target>(make: &mut Factory<'_, T>) {
    let want = alone(make, 2);
    let mut t = make(&CAPACITIES);
    let vocab = t.vocab_size();
    let p = prompt(1, PROMPT, vocab);
    let too_long = prompt(4, CAPACITIES[2] as usize + 1, vocab);
    let outside = [vocab as u32];
    t.logits(&[window(2, 0, &p[..20], 0)]).expect("first chunk");
    let bad: [(&str, Vec<Window<'_>>); 4] = [
        (
            "a window not at its session's end",
            vec![window(2, 19, &p[20..], 1)],
        ),
        ("a window past capacity", vec![window(0, 0, &too_long, 1)]),
        (
            "two windows of one session",
            vec![window(2, 20, &p[20..30], 0), window(2, 30, &p[30..], 1)],
        ),
        (
            "a token outside the vocabulary",
            vec![window(2, 20, &outside, 1)],
        ),
    ];
    for (what, round) in &bad {
        assert!(t.logits(round).is_err(), "{what} is refused");
    }
    let mut got = vec![t
        .logits(&[window(2, 20, &p[20..], 1)])
        .expect("second chunk after the refusals")
        .remove(0)];
    for i in 0..STEPS - 1 {
        let token = [argmax(&got[i])];
        let pos = (PROMPT + i) as u64;
        got.push(
            t.logits(&[window(2, pos, &token, 1)])
                .expect("decode")
                .remove(0),
        );
    }
    assert_rows("after refused rounds", &want, &got);
}

/// With a drafter: three sessions' drafts asked together equal each asked alone, and an ask for
/// a session that does not exist is answered with an error without spoiling the others.
pub fn drafts_batched_equal_alone<T: Target>(make: &mut Factory<'_, T>) {
    let mut t = make(&CAPACITIES);
    if !t.has_drafter() {
        return;
    }
    let vocab = t.vocab_size();
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|s| prompt(10 + s, 20 + 5 * s as usize, vocab))
        .collect();
    let round: Vec<Window<'_>> = prompts
        .iter()
        .enumerate()
        .map(|(s, p)| window(s, 0, p, 1))
        .collect();
    let rows = t.logits(&round).expect("prompts");
    let asks: Vec<DraftAsk> = rows
        .iter()
        .enumerate()
        .map(|(s, r)| DraftAsk {
            session: SessionId(s),
            next_token: argmax(r),
            num_drafts: 1 + s,
        })
        .collect();
    let mut with_bad = asks.clone();
    with_bad.push(DraftAsk {
        session: SessionId(CAPACITIES.len() + 5),
        next_token: 0,
        num_drafts: 2,
    });
    let together = t.draft(&with_bad);
    assert_eq!(together.len(), with_bad.len(), "one answer per ask");
    assert!(together[3].is_err(), "an ask for no session is refused");
    for (s, ask) in asks.iter().enumerate() {
        let mut u = make(&CAPACITIES);
        u.logits(&[window(s, 0, &prompts[s], 1)])
            .expect("prompt alone");
        let one = u
            .draft_one(ask.session, ask.next_token, ask.num_drafts)
            .expect("drafts alone");
        assert_eq!(
            together[s].as_ref().expect("drafts together"),
            &one,
            "session {s}"
        );
        assert!(one.len() <= ask.num_drafts, "at most the drafts asked");
    }
}

/// The ask of a sampled stream's step `i` (top-k 1: always the greedy token).
fn draw_ask(i: usize, top_k: u32) -> DrawAsk {
    DrawAsk {
        temperature: 0.8,
        top_k,
        top_p: if i.is_multiple_of(2) { 0.9 } else { 1.0 },
        min_p: 0.0,
        generator: Rng::new(mix64(i as u64 + 1)),
    }
}

/// The tokens a target answered for a draw: its own, or the host's from the rows it sent back.
fn drawn_all(rows: WindowRows, ask: &DrawAsk, vocab: usize) -> Vec<u32> {
    match rows {
        WindowRows::Tokens(ids) => ids
            .into_iter()
            .map(|id| id.expect("a finite logit"))
            .collect(),
        WindowRows::Logits(flat) => flat
            .chunks_exact(vocab)
            .enumerate()
            .map(|(j, row)| {
                Distribution::new(row, &ask.params())
                    .expect("a finite logit")
                    .sample_at(ask.uniform(j))
            })
            .collect(),
    }
}

/// The one token of a one-row draw.
fn drawn(rows: WindowRows, ask: &DrawAsk, vocab: usize) -> u32 {
    let tokens = drawn_all(rows, ask, vocab);
    assert_eq!(tokens.len(), 1, "a draw of one row answers one token");
    tokens[0]
}

/// Other sessions' windows of a round beside a sampled stream: (session, start, tokens, rows,
/// want).
type Beside = Vec<(usize, u64, Vec<u32>, usize, Want)>;

/// The main stream's prompt in `session` of `t`, then `STEPS - 1` sampled steps, each round
/// beside what `beside(t, step)` adds (windows of other sessions and their wants, and where the
/// stream's window goes among them); the tokens drawn.
fn sampled_stream<T: Target>(
    t: &mut T,
    top_k: u32,
    beside: &mut dyn FnMut(usize) -> (Beside, usize),
) -> Vec<u32> {
    let vocab = t.vocab_size();
    let p = prompt(1, PROMPT, vocab);
    t.logits(&[window(0, 0, &p[..20], 0)]).expect("first chunk");
    let ask = draw_ask(0, top_k);
    let first = t
        .forward(&[window(0, 20, &p[20..], 1)], &[Want::Draw(ask)])
        .expect("second chunk")
        .remove(0);
    let mut tokens = vec![drawn(first, &ask, vocab)];
    for i in 1..STEPS {
        let ask = draw_ask(i, top_k);
        let token = [tokens[i - 1]];
        let (others, place) = beside(i);
        let mut windows: Vec<Window<'_>> = others
            .iter()
            .map(|(s, start, toks, n, _)| window(*s, *start, toks, *n))
            .collect();
        let mut wants: Vec<Want> = others.iter().map(|o| o.4).collect();
        windows.insert(place, window(0, (PROMPT + i - 1) as u64, &token, 1));
        wants.insert(place, Want::Draw(ask));
        let mut rows = t.forward(&windows, &wants).expect("sampled round");
        tokens.push(drawn(rows.swap_remove(place), &ask, vocab));
    }
    tokens
}

/// A sampled stream's draws alone equal its draws beside a greedy window, a logits window and a
/// prompt chunk of other sessions, in turning order; drawn with top-k 1 it follows the greedy
/// tokens of its logits alone.
pub fn draws_batched_equal_alone<T: Target>(make: &mut Factory<'_, T>) {
    let mut t = make(&CAPACITIES);
    let want = sampled_stream(&mut t, 0, &mut |_| (Vec::new(), 0));
    let mut t = make(&CAPACITIES);
    let vocab = t.vocab_size();
    let other = prompt(2, 24, vocab);
    t.logits(&[window(1, 0, &other[..8], 1)])
        .expect("other prompt");
    let got = sampled_stream(&mut t, 0, &mut |i| {
        let others = vec![
            (1, (8 + i - 1) as u64, vec![other[8 + i]], 1, Want::Greedy),
            (
                2,
                3 * (i - 1) as u64,
                other[i..i + 3].to_vec(),
                0,
                Want::Greedy,
            ),
            (
                3,
                2 * (i - 1) as u64,
                other[i..i + 2].to_vec(),
                1,
                Want::Logits,
            ),
        ];
        (others, i % 4)
    });
    assert_eq!(want, got, "draws: alone = batched");
    let greedy: Vec<u32> = alone(make, 0).iter().map(|r| argmax(r)).collect();
    let mut t = make(&CAPACITIES);
    let top1 = sampled_stream(&mut t, 1, &mut |_| (Vec::new(), 0));
    assert_eq!(greedy, top1, "draws: top-k 1 is the greedy token");
    // A window of three rows draws each with its own uniform: the tokens of writing its tokens
    // one at a time, each drawn with the generator as far on.
    let p = prompt(1, PROMPT, vocab);
    let window_tokens = [want[0], p[3], p[5]];
    let ask = draw_ask(7, 0);
    let mut t = make(&CAPACITIES);
    t.logits(&[window(0, 0, &p, 0)]).expect("prompt");
    let rows = t
        .forward(
            &[window(0, PROMPT as u64, &window_tokens, 3)],
            &[Want::Draw(ask)],
        )
        .expect("a window of three rows")
        .remove(0);
    let together = drawn_all(rows, &ask, vocab);
    // The premise: a window's rows are the rows of writing its tokens one at a time.
    let mut t = make(&CAPACITIES);
    t.logits(&[window(0, 0, &p, 0)]).expect("prompt");
    let window_rows = t
        .logits(&[window(0, PROMPT as u64, &window_tokens, 3)])
        .expect("the window's rows")
        .remove(0);
    let mut t = make(&CAPACITIES);
    t.logits(&[window(0, 0, &p, 0)]).expect("prompt");
    for j in 0..3 {
        let at = (PROMPT + j) as u64;
        let one = t
            .logits(&[window(0, at, &window_tokens[j..j + 1], 1)])
            .expect("one row")
            .remove(0);
        assert!(
            same_bits(&window_rows[j * vocab..(j + 1) * vocab], &one),
            "draws: row {j} of a window differs from writing its token alone"
        );
    }
    let mut t = make(&CAPACITIES);
    t.logits(&[window(0, 0, &p, 0)]).expect("prompt");
    let one_by_one: Vec<u32> = (0..3)
        .map(|j| {
            let mut generator = ask.generator;
            generator.skip(j);
            let one = DrawAsk { generator, ..ask };
            let at = (PROMPT + j) as u64;
            let rows = t
                .forward(
                    &[window(0, at, &window_tokens[j..j + 1], 1)],
                    &[Want::Draw(one)],
                )
                .expect("one row")
                .remove(0);
            drawn(rows, &one, vocab)
        })
        .collect();
    assert_eq!(together, one_by_one, "draws: a window's rows = one by one");
}

/// With a prompt cache: blocks saved after each prompt chunk and restored into other sessions
/// (of another capacity too) continue bit for bit as the session that computed them, their
/// drafts included; a restore into a session that holds positions is refused.
pub fn cached_equals_computed<T: Target>(make: &mut Factory<'_, T>) {
    let mut t = make(&CAPACITIES);
    if t.cache_block_bytes(20).is_none() {
        return;
    }
    let want = alone(make, 0);
    let vocab = t.vocab_size();
    let p = prompt(1, PROMPT, vocab);
    let (first, second) = (crate::CacheBlockId(7), crate::CacheBlockId(8));
    t.logits(&[window(0, 0, &p[..20], 0)]).expect("first chunk");
    t.cache_save(SessionId(0), 0, 20, first)
        .expect("save the first block");
    let computed = t
        .logits(&[window(0, 20, &p[20..], 1)])
        .expect("second chunk")
        .remove(0);
    assert_rows("computed", &want[..1], &[computed]);
    t.cache_save(SessionId(0), 20, 40, second)
        .expect("save the second block");
    // One block restored, the second chunk computed after it.
    t.cache_restore(SessionId(1), &[first])
        .expect("restore one block");
    let row = t
        .logits(&[window(1, 20, &p[20..], 1)])
        .expect("second chunk after a restore")
        .remove(0);
    assert_rows("one block restored", &want[..1], &[row]);
    // Both restored into the larger session: decoding goes on as from the computed prompt.
    t.cache_restore(SessionId(3), &[first, second])
        .expect("restore both");
    if t.has_drafter() {
        let token = argmax(&want[0]);
        let computed = t
            .draft_one(SessionId(0), token, 3)
            .expect("drafts computed");
        let restored = t
            .draft_one(SessionId(3), token, 3)
            .expect("drafts restored");
        assert_eq!(computed, restored, "cached = computed: drafts");
    }
    let mut got = vec![want[0].clone()];
    for i in 0..STEPS - 1 {
        let token = [argmax(&got[i])];
        let pos = (PROMPT + i) as u64;
        got.push(
            t.logits(&[window(3, pos, &token, 1)])
                .expect("decode after a restore")
                .remove(0),
        );
    }
    assert_rows("two blocks restored", &want, &got);
    assert!(
        t.cache_restore(SessionId(3), &[first]).is_err(),
        "a restore into a session holding positions is refused"
    );
    t.cache_drop(first);
    t.release(SessionId(2));
    assert!(
        t.cache_restore(SessionId(2), &[first, second]).is_err(),
        "a dropped block cannot be restored"
    );
}

/// How a check builds its targets: one with a session per capacity.
pub type Factory<'a, T> = dyn FnMut(&[u64]) -> T + 'a;

/// A named check.
type Check<T> = (&'static str, fn(&mut Factory<'_, T>));

/// Every check, in order, each printed as it passes (`name` says whose target).
pub fn run_all<T: Target>(name: &str, make: &mut Factory<'_, T>) {
    let checks: [Check<T>; 7] = [
        ("alone = batched", alone_equals_batched::<T>),
        ("alone = moved, failed moves", moved_equals_unmoved::<T>),
        ("rollback and release", rollback_and_release::<T>),
        ("bad rounds change nothing", bad_rounds_change_nothing::<T>),
        ("drafts batched = alone", drafts_batched_equal_alone::<T>),
        ("draws batched = alone", draws_batched_equal_alone::<T>),
        (
            "prompt cache: restored = computed",
            cached_equals_computed::<T>,
        ),
    ];
    for (check, run) in checks {
        run(make);
        eprintln!("{name}: conformance: {check}: ok");
    }
}
