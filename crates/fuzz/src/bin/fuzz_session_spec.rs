fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::session_spec(data));
}
