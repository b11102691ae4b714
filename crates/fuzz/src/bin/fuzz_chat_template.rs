fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::chat_template(data));
}
