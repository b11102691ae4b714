//! # lane — the engine that owns every stream
//!
//! One [`Target`] (a model on a device, or the fake target in tests) holds the per-session model
//! state; the engine owns the streams, the admission queue and the rounds, and applies the pure
//! session decisions of the `slots` crate.

mod target;

pub use target::{Target, TargetError, Window};
