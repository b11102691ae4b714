//! `tokenizer.json` through the Hugging Face `tokenizers` crate.

use crate::LoadError;
use std::path::{Path, PathBuf};

/// Why text could not be turned into ids or back, or a chat rendered.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("{}: cannot encode: {reason}", file.display())]
    Encode { file: PathBuf, reason: String },
    #[error("{}: cannot decode: {reason}", file.display())]
    Decode { file: PathBuf, reason: String },
    /// The chat template failed to render (a template error, or its `raise_exception`).
    #[error("{0}")]
    Template(#[from] minijinja::Error),
    #[error("the chat template altered a marker of written text")]
    MarkerAltered,
    /// A chat whose last message the reply should continue, where the template does not write
    /// that message's text as given (or it is empty).
    #[error("the chat template does not write the last message's text as given, so a reply cannot continue it")]
    LastMessageNotWritten,
}

/// A loaded tokenizer; text in, ids out, and back.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The same tokenizer reading special tokens' text as plain text (for text that comes from a
    /// user: see [`Tokenizer::encode_as_text`]).
    as_text: tokenizers::Tokenizer,
    file: PathBuf,
}

impl Tokenizer {
    /// Reads `dir/tokenizer.json`.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer, LoadError> {
        Tokenizer::from_file(&dir.join("tokenizer.json"))
    }

    pub fn from_file(file: &Path) -> Result<Tokenizer, LoadError> {
        if !file.exists() {
            return Err(LoadError::Tokenizer {
                file: file.to_path_buf(),
                reason: "missing; the model directory needs its tokenizer.json".into(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(file).map_err(|e| LoadError::Tokenizer {
            file: file.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut as_text = inner.clone();
        as_text.set_encode_special_tokens(true);
        Ok(Tokenizer {
            inner,
            as_text,
            file: file.to_path_buf(),
        })
    }

    /// Ids of `text`. Special tokens written in the text (`<|im_start|>`) are recognised; no
    /// BOS/EOS is added (chat templates write them themselves, as transformers does).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TextError> {
        self.ids(&self.inner, text)
    }

    /// Ids of `text` with every special token's text read as plain characters: `<|im_end|>`
    /// written by a user is `<`, `|`, `im`, … and never the end-of-turn token.
    pub fn encode_as_text(&self, text: &str) -> Result<Vec<u32>, TextError> {
        self.ids(&self.as_text, text)
    }

    fn ids(&self, tokenizer: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>, TextError> {
        let encoding = tokenizer
            .encode(text, false)
            .map_err(|e| TextError::Encode {
                file: self.file.clone(),
                reason: e.to_string(),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of every special (control) token the tokenizer matches in text: `<|im_start|>`,
    /// `<|im_end|>`, `<|endoftext|>` for Qwen. Added tokens that are not special (`<think>`) are
    /// not among them.
    pub fn special_tokens(&self) -> Vec<String> {
        let mut tokens: Vec<String> = self
            .inner
            .get_added_tokens_decoder()
            .into_values()
            .filter(|t| t.special)
            .map(|t| t.content)
            .filter(|t| !t.is_empty())
            .collect();
        tokens.sort();
        tokens
    }

    /// Text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TextError> {
        self.inner.decode(ids, true).map_err(|e| TextError::Decode {
            file: self.file.clone(),
            reason: e.to_string(),
        })
    }

    /// The text of one token, a special one's included (`<|im_end|>`): what `logprobs` and
    /// `/tokenize`'s `token_strs` show for it.
    pub fn token_text(&self, id: u32) -> Result<String, TextError> {
        self.inner
            .decode(&[id], false)
            .map_err(|e| TextError::Decode {
                file: self.file.clone(),
                reason: e.to_string(),
            })
    }

    /// The id of a token written as text (`<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// An upper bound on the bytes of text one token stands for: the longest token's text as
    /// the vocabulary writes it (a byte-level BPE writes each byte as one character of one or
    /// two bytes, SentencePiece a space as three), added tokens included.
    pub fn max_token_bytes(&self) -> usize {
        self.inner
            .get_vocab(true)
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// Number of ids the tokenizer knows, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
