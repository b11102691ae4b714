fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::responses(data));
}
