//! Hostile `--slot-contexts` specs: any text, and valid specs with bytes changed, are parsed or
//! refused with the item named; never a panic, never an overflow, and what parses holds the
//! bounds the planner relies on.

use proptest::prelude::*;
use slots::SessionSpec;
use slots::{MARGIN, MAX_SESSIONS};

/// The bounds of a parsed spec: every session within the model's positions, fewer sessions than
/// the hard maximum (the engine's own counts too).
fn check(spec: &str, max_tokens: u64) {
    match SessionSpec::parse(spec, max_tokens) {
        Ok(parsed) => {
            assert!(parsed.num_sessions() < MAX_SESSIONS, "{spec:?}");
            for capacity in parsed.capacities() {
                assert!(capacity > MARGIN, "{spec:?}: capacity {capacity}");
                assert!(
                    capacity - MARGIN <= max_tokens,
                    "{spec:?}: capacity {capacity}"
                );
            }
        }
        Err(e) => {
            // The message names the item (or says the spec is empty).
            let text = e.to_string();
            assert!(text.starts_with("session spec"), "{spec:?}: {text}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_parsed_or_refused_without_a_panic(spec in ".{0,64}", max in 1u64..=u64::MAX - MARGIN) {
        check(&spec, max);
    }

    #[test]
    fn spec_like_text_is_parsed_or_refused_without_a_panic(
        spec in "[0-9xX,. kKmM+-]{0,40}",
        max in prop_oneof![Just(40_960u64), Just(u64::MAX - MARGIN), 1u64..100_000],
    ) {
        check(&spec, max);
    }

    #[test]
    fn huge_numbers_and_counts_do_not_overflow(
        size in any::<u64>(),
        count in any::<u64>(),
        max in prop_oneof![Just(u64::MAX - MARGIN), 1u64..1_000_000],
    ) {
        check(&format!("{size}x{count}"), max);
        check(&format!("{size},{size}x{count},{count}"), max);
    }
}
