fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::reply_stream(data));
}
