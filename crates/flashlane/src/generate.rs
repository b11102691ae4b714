//! `flashlane generate`: one reply decoded through a session on the CPU, greedy by default, for
//! checking against reference implementations.

use crate::device::ModelArgs;
use crate::logits::{load_model, parse_ids};
use crate::Failure;
use anyhow::anyhow;
use backend_cpu::{CpuBackend, CpuTarget, RollbackWindow};
use clap::Args;
use lane::sampling::{sample, Rng};
use lane::TargetExt;
use lane::{SamplingParams, SessionId, Window};
use model::{ChatMessage, ChatTemplate, Tokenizer};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt text (tokenized with the model's tokenizer.json)
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    pub prompt: Option<String>,
    /// Prompt token ids, comma-separated, e.g. `3,17,42`
    #[arg(long)]
    pub ids: Option<String>,
    /// Wrap --prompt as a user message in the model's chat template
    #[arg(long, requires = "prompt")]
    pub chat: bool,
    /// Most tokens to generate
    #[arg(long, default_value_t = 64,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=crate::TOKENS_MAX))]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Seed of the sampler (with --temperature > 0)
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep going past end-of-sequence tokens
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print `{"tokens":[...],"text":"..."}`
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &GenerateArgs) -> Result<(), Failure> {
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        return Err(Failure::bad_input(anyhow!(
            "--temperature must be ≥ 0, got {}",
            args.temperature
        )));
    }
    let dir = args.model.dir()?;
    let tokenizer_path = dir.join("tokenizer.json");
    let tokenizer = if tokenizer_path.exists() || args.prompt.is_some() {
        Some(Tokenizer::from_dir(&dir).map_err(|e| Failure::from(anyhow!(e)))?)
    } else {
        None
    };
    let prompt: Vec<u32> = match (&args.ids, &args.prompt, &tokenizer) {
        (Some(ids), _, _) => parse_ids(ids)?,
        (None, Some(text), Some(tok)) => {
            if args.chat {
                let template = ChatTemplate::from_dir(&dir)
                    .map_err(|e| Failure::from(anyhow!(e)))?
                    .ok_or_else(|| {
                        Failure::bad_input(anyhow!("--chat: the model has no chat template"))
                    })?;
                // As `serve` does: the message's text never becomes control tokens.
                template.render_ids(
                    tok,
                    &[ChatMessage {
                        role: "user".into(),
                        content: text.clone(),
                        ..Default::default()
                    }],
                    true,
                )?
            } else {
                tok.encode(text)?
            }
        }
        _ => return Err(Failure::bad_input(anyhow!("give --prompt or --ids"))),
    };
    if prompt.is_empty() {
        return Err(Failure::bad_input(anyhow!("the prompt has no tokens")));
    }
    let model = load_model(&args.model)?;
    if let Some(bad) = prompt.iter().find(|&&t| t as usize >= model.vocab_size()) {
        return Err(Failure::bad_input(anyhow!(
            "token id {bad} is outside the vocabulary of {}",
            model.vocab_size()
        )));
    }
    let eos = if args.ignore_eos {
        Vec::new()
    } else {
        // The rule `serve` stops by (the chat template's EOS only matters with --chat).
        let template = if args.chat {
            ChatTemplate::from_dir(&dir).map_err(|e| Failure::from(anyhow!(e)))?
        } else {
            None
        };
        model::end_of_reply_ids(&dir, &model.config, tokenizer.as_ref(), template.as_ref())
    };
    let capacity = prompt.len() + args.max_tokens + slots::MARGIN as usize;
    let mut target = CpuTarget::new(CpuBackend::with_rollback_window(
        model,
        &[capacity as u64],
        RollbackWindow::NONE,
    ));
    let params = SamplingParams {
        temperature: args.temperature,
        seed: Some(args.seed),
        ..SamplingParams::greedy()
    };
    let mut rng = Rng::new(args.seed);
    let session = SessionId(0);

    let mut generated = Vec::with_capacity(args.max_tokens);
    let mut window: Vec<u32> = prompt.clone();
    let mut start = 0u64;
    while generated.len() < args.max_tokens {
        let logits = target
            .logits(&[Window {
                session,
                start,
                tokens: &window,
                num_logits: 1,
            }])
            .map_err(|e| Failure::from(anyhow!(e)))?
            .remove(0);
        start += window.len() as u64;
        let next =
            sample(&logits, &params, &mut rng).map_err(|e| Failure::from(anyhow!("{e:?}")))?;
        generated.push(next);
        if eos.contains(&next) {
            break;
        }
        window = vec![next];
    }
    let text = match &tokenizer {
        Some(tok) => tok.decode(&generated)?,
        None => String::new(),
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "tokens": generated, "text": text })
        );
    } else {
        println!("{text}");
    }
    Ok(())
}
