//! # server — flashlane's OpenAI-compatible HTTP API
//!
//! HTTP handlers parse and check requests, then talk to the engine thread (the single owner of
//! every stream) over bounded channels; tokens come back per round on a bounded channel per
//! request.

pub mod error;
pub mod request;
pub mod text;
