fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::messages(data));
}
