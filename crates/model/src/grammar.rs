//! Grammars over the model's vocabulary, with llguidance: a Lark grammar (JSON schemas inline as
//! `%json {…}`, regexes as `/…/`) compiled against the token trie of `tokenizer.json`, and a
//! matcher per reply that says which tokens each position allows.
//!
//! The trie is built once per model (150k tokens: tens of milliseconds); a grammar is compiled per
//! request. Added tokens written `<…>` (`<think>`, `<tool_call>`, `<|im_end|>`) count as special
//! tokens, as llguidance's own Hugging Face glue treats them: a grammar names them `<think>` or
//! `<[id]>`, and no text terminal can produce one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// Why a grammar could not be built or followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// The tokenizer's vocabulary could not be read as bytes.
    #[error("{}: cannot build the token trie: {reason}", file.display())]
    Vocabulary { file: PathBuf, reason: String },
    /// The grammar (or a JSON schema inside it) does not compile.
    #[error("{0}")]
    Compile(String),
    /// The matcher failed on a token (a token it did not allow, or an internal limit).
    #[error("{0}")]
    Match(String),
}

/// llguidance's token environment over our tokenizer: the trie, and tokenising through the
/// model's own tokenizer (so forced text becomes the tokens the model would have written).
struct VocabEnv {
    trie: TokTrie,
    tokenizer: tokenizers::Tokenizer,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(bytes, |text| {
            self.tokenizer
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default()
        })
    }
}

/// Compiles grammars for one model: its vocabulary as a token trie.
pub struct GrammarCompiler {
    factory: llguidance::ParserFactory,
    vocab_size: usize,
    /// The tokens that end a reply: never in a mask's bits (the engine allows them where the
    /// grammar may end, and only as the end).
    end_ids: Vec<u32>,
}

/// A grammar compiled for one request; [`CompiledGrammar::matcher`] starts a reply in it.
pub struct CompiledGrammar {
    fresh: Mutex<llguidance::Matcher>,
    end_ids: Vec<u32>,
}

/// A reply's place in its grammar.
pub struct GrammarMatcher {
    matcher: llguidance::Matcher,
    end_ids: Vec<u32>,
}

/// The bytes of every token id below `vocab_size`, special tokens marked as llguidance wants.
fn token_bytes(
    tokenizer_json: &serde_json::Value,
    vocab_size: usize,
) -> Result<Vec<Vec<u8>>, String> {
    let mut bytes =
        llguidance::token_bytes_from_tokenizer_json(tokenizer_json).map_err(|e| e.to_string())?;
    if let Some(added) = tokenizer_json["added_tokens"].as_array() {
        for token in added {
            let (Some(id), Some(content)) = (
                token["id"].as_u64().map(|id| id as usize),
                token["content"].as_str(),
            ) else {
                continue;
            };
            let bracketed = content.starts_with('<') && content.ends_with('>') && content.len() > 2;
            if bracketed
                && id < bytes.len()
                && bytes[id].first() != Some(&TokTrie::SPECIAL_TOKEN_MARKER)
            {
                let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                marked.extend_from_slice(content.as_bytes());
                bytes[id] = marked;
            }
        }
    }
    if bytes.len() > vocab_size {
        return Err(format!(
            "the tokenizer has {} tokens but the model's vocabulary only {vocab_size}",
            bytes.len()
        ));
    }
    // Ids the model has but the tokenizer does not (padding rows of lm_head): special tokens no
    // grammar names, so never allowed.
    while bytes.len() < vocab_size {
        let mut name = format!(".<[{}]>", bytes.len()).into_bytes();
        name[0] = TokTrie::SPECIAL_TOKEN_MARKER;
        bytes.push(name);
    }
    Ok(bytes)
}

impl GrammarCompiler {
    /// The trie of `tokenizer_file` for a model whose logits rows have `vocab_size` ids;
    /// `end_ids` are the tokens that end a reply.
    pub fn new(
        tokenizer_file: &Path,
        vocab_size: usize,
        end_ids: &[u32],
    ) -> Result<GrammarCompiler, GrammarError> {
        let failed = |reason: String| GrammarError::Vocabulary {
            file: tokenizer_file.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(tokenizer_file).map_err(|e| failed(e.to_string()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| failed(format!("not valid JSON: {e}")))?;
        let words = token_bytes(&json, vocab_size).map_err(failed)?;
        let tokenizer = tokenizers::Tokenizer::from_bytes(text.as_bytes())
            .map_err(|e| failed(e.to_string()))?;
        let eos = end_ids.first().copied().unwrap_or(0);
        let info = TokRxInfo::new(vocab_size as u32, eos);
        let mut trie = TokTrie::from(&info, &words);
        if end_ids.len() > 1 {
            trie = trie.with_eos_tokens(end_ids);
        }
        let env: TokEnv = Arc::new(VocabEnv { trie, tokenizer });
        let mut factory =
            llguidance::ParserFactory::new_simple(&env).map_err(|e| failed(e.to_string()))?;
        factory.quiet();
        Ok(GrammarCompiler {
            factory,
            vocab_size,
            end_ids: end_ids.to_vec(),
        })
    }

    /// The width of the masks this compiler's matchers give (the model's logits row).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Compiles a Lark grammar (llguidance's dialect: `%json {…}`, `<special>`, `<[id]>`).
    pub fn compile_lark(&self, lark: &str) -> Result<CompiledGrammar, GrammarError> {
        let grammar = llguidance::api::TopLevelGrammar::from_lark(lark.to_string());
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError::Compile(e.to_string()))?;
        let matcher = llguidance::Matcher::new(Ok(parser));
        if let Some(error) = matcher.get_error() {
            return Err(GrammarError::Compile(error));
        }
        Ok(CompiledGrammar {
            fresh: Mutex::new(matcher),
            end_ids: self.end_ids.clone(),
        })
    }
}

impl CompiledGrammar {
    /// A reply at the grammar's start.
    pub fn matcher(&self) -> GrammarMatcher {
        let fresh = self
            .fresh
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        GrammarMatcher {
            matcher: fresh.deep_clone(),
            end_ids: self.end_ids.clone(),
        }
    }
}

impl GrammarMatcher {
    fn failed(&self, error: impl std::fmt::Display) -> GrammarError {
        GrammarError::Match(
            self.matcher
                .get_error()
                .unwrap_or_else(|| error.to_string()),
        )
    }

    /// The tokens the next position allows, as bit words (bit `t % 32` of word `t / 32`), and
    /// whether the grammar may end here.
    pub fn mask(&mut self) -> Result<(Vec<u32>, bool), GrammarError> {
        // A matcher in its error state counts as stopped too: that is a failure, not an end.
        if let Some(error) = self.matcher.get_error() {
            return Err(GrammarError::Match(error));
        }
        if self.matcher.is_stopped() {
            return Ok((Vec::new(), true));
        }
        let mask = self.matcher.compute_mask().map_err(|e| self.failed(e))?;
        let may_end = self.matcher.is_accepting().map_err(|e| self.failed(e))?;
        let mut words = mask.as_slice().to_vec();
        // llguidance allows its end tokens where the grammar may end; the engine decides them
        // (from `may_end`), so a reply that keeps going past them (`ignore_eos`) never draws one
        // as text.
        for &id in &self.end_ids {
            if let Some(word) = words.get_mut(id as usize / 32) {
                *word &= !(1 << (id % 32));
            }
        }
        Ok((words, may_end))
    }

    pub fn accept(&mut self, token: u32) -> Result<(), GrammarError> {
        self.matcher
            .consume_token(token)
            .map_err(|e| self.failed(e))
    }

    pub fn rollback(&mut self, tokens: usize) -> Result<(), GrammarError> {
        self.matcher.rollback(tokens).map_err(|e| self.failed(e))
    }

    /// How many of `tokens` the grammar allows in a row from here (nothing is recorded).
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> Result<usize, GrammarError> {
        if tokens.is_empty() || self.matcher.is_stopped() {
            return Ok(0);
        }
        self.matcher
            .validate_tokens(tokens)
            .map_err(|e| self.failed(e))
    }

    /// Nothing may follow (a matcher that failed is not complete: its next mask says why).
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> (GrammarCompiler, crate::Tokenizer) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        let tokenizer = crate::Tokenizer::from_dir(&dir).unwrap();
        let compiler = GrammarCompiler::new(&dir.join("tokenizer.json"), 8192, &[2, 0]).unwrap();
        (compiler, tokenizer)
    }

    /// Greedy decoding against a mask where the "model" prefers the lowest allowed id: follows
    /// the grammar to its end and returns the text.
    fn lowest_allowed(compiler: &GrammarCompiler, tok: &crate::Tokenizer, lark: &str) -> String {
        let grammar = compiler.compile_lark(lark).unwrap();
        let mut m = grammar.matcher();
        let mut ids = Vec::new();
        for _ in 0..200 {
            if m.is_complete() {
                break;
            }
            let (words, may_end) = m.mask().unwrap();
            let allowed = (0..compiler.vocab_size() as u32).find(|&t| {
                words
                    .get(t as usize / 32)
                    .is_some_and(|w| w & (1 << (t % 32)) != 0)
            });
            match allowed {
                Some(t) if !(may_end && t <= 2) => {
                    m.accept(t).unwrap();
                    ids.push(t);
                }
                _ => break,
            }
        }
        tok.decode(&ids).unwrap()
    }

    #[test]
    fn a_regex_grammar_allows_only_its_language_and_completes() {
        let (compiler, tok) = tiny();
        let text = lowest_allowed(&compiler, &tok, r#"start: /[0-9]{3}-[a-c]{2}/"#);
        assert_eq!(text.len(), 6, "{text:?}");
        assert!(text.chars().take(3).all(|c| c.is_ascii_digit()), "{text:?}");
        assert_eq!(&text[3..4], "-");
    }

    #[test]
    fn a_json_schema_reply_parses_and_follows_the_schema() {
        let (compiler, tok) = tiny();
        let lark = r#"start: %json {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7}, "c": {"enum": ["red", "blue"]}}, "required": ["n", "c"], "additionalProperties": false}"#;
        let text = lowest_allowed(&compiler, &tok, lark);
        let value: serde_json::Value = serde_json::from_str(&text).expect(&text);
        let n = value["n"].as_i64().unwrap();
        assert!((3..=7).contains(&n), "{text}");
        assert!(
            ["red", "blue"].contains(&value["c"].as_str().unwrap()),
            "{text}"
        );
    }

    #[test]
    fn drafts_are_validated_and_rolled_back_without_a_trace() {
        let (compiler, tok) = tiny();
        let grammar = compiler.compile_lark(r#"start: "yes" | "no""#).unwrap();
        let mut m = grammar.matcher();
        let yes = tok.encode("yes").unwrap();
        let mut drafts = yes.clone();
        drafts.push(tok.encode("x").unwrap()[0]);
        assert_eq!(m.valid_prefix(&drafts).unwrap(), yes.len());
        let before = m.mask().unwrap();
        for &t in &yes {
            m.accept(t).unwrap();
        }
        assert!(
            m.is_complete() || m.mask().unwrap().1,
            "\"yes\" ends the grammar"
        );
        m.rollback(yes.len()).unwrap();
        assert_eq!(m.mask().unwrap(), before);
        assert!(m.accept(tok.encode("x").unwrap()[0]).is_err());
    }

    #[test]
    fn end_tokens_are_never_in_a_masks_bits_and_a_failed_matcher_says_so() {
        let (compiler, tok) = tiny();
        let grammar = compiler.compile_lark(r#"start: "a" | "ab""#).unwrap();
        let mut m = grammar.matcher();
        m.accept(tok.encode("a").unwrap()[0]).unwrap();
        let (words, may_end) = m.mask().unwrap();
        assert!(may_end, "\"a\" may end the grammar");
        for end in [2u32, 0] {
            assert_eq!(
                words[end as usize / 32] & (1 << (end % 32)),
                0,
                "end token {end}"
            );
        }
        // A token the grammar does not allow puts the matcher in its error state: an error,
        // never a completion.
        assert!(m.accept(tok.encode("z").unwrap()[0]).is_err());
        assert!(!m.is_complete());
        assert!(m.mask().is_err());
    }

    #[test]
    fn special_tokens_are_named_by_their_text_and_cannot_be_spelled() {
        let (compiler, tok) = tiny();
        let think = tok.token_id("<think>").unwrap();
        let grammar = compiler.compile_lark(r#"start: <think> "a""#).unwrap();
        let mut m = grammar.matcher();
        let (words, _) = m.mask().unwrap();
        let allowed: Vec<u32> = (0..8192u32)
            .filter(|&t| {
                words
                    .get(t as usize / 32)
                    .is_some_and(|w| w & (1 << (t % 32)) != 0)
            })
            .collect();
        assert_eq!(allowed, vec![think]);
        assert!(compiler.compile_lark("start: /(").is_err());
        assert!(compiler
            .compile_lark(r#"start: %json {"type": "no-such-type"}"#)
            .is_err());
    }

    #[test]
    fn a_vocabulary_wider_than_the_tokenizer_never_allows_the_padding_ids() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        let compiler = GrammarCompiler::new(&dir.join("tokenizer.json"), 8192 + 64, &[2]).unwrap();
        let grammar = compiler.compile_lark(r#"start: /(.|\n)*/"#).unwrap();
        let (words, _) = grammar.matcher().mask().unwrap();
        assert!((8192..8192 + 64u32).all(|t| words
            .get(t as usize / 32)
            .is_none_or(|w| w & (1 << (t % 32)) == 0)));
        assert!(GrammarCompiler::new(&dir.join("tokenizer.json"), 100, &[2]).is_err());
    }
}
