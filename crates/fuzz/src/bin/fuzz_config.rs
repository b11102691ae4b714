fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::config(data));
}
