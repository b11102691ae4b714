//! The session-sizing flags and environment variables of design §2, shared by `plan` and `serve`.
//! Flags win over environment variables (clap reads the variable only when the flag is absent).

use crate::Failure;
use clap::Args;
use slots::{Plan, Policy, SessionSpec, MARGIN};

/// The engine's session when neither `--context` nor the model says otherwise.
pub const DEFAULT_CONTEXT: u64 = 8192;

/// Share of the machine's memory the sessions and weights may take by default.
pub const DEFAULT_LOAD_SHARE: f64 = 0.70;

/// Share of the GPU's free memory at start-up the sessions and weights may take by default with
/// `--device cuda`: the rest is for the CUDA context, the compiled kernels, scratch and graphs.
pub const DEFAULT_GPU_LOAD_SHARE: f64 = 0.90;

/// Kept free under the cap for allocations we do not plan (scratch growth, the allocator's own).
pub const MEMORY_MARGIN_BYTES: u64 = 256 << 20;
/// Largest `--load-limit-gb`: a petabyte is more memory than any machine has; larger is a typo
/// (and would overflow the byte count).
pub const LOAD_LIMIT_GB_MAX: f64 = 1e6;
/// Share of the room the sessions leave under the cap that the prompt cache takes when
/// `--prompt-cache-gb` is not given: the rest stays free for what the estimate missed
/// (allocator slack, the grammar tries, the HTTP side).
pub const DEFAULT_PROMPT_CACHE_SHARE: f64 = 0.5;

/// A count flag's value: a whole number, 0 or more, said in those words when it is not (the
/// binary lets every flag take a negative number as its value, `with_negative_numbers` in
/// main.rs, so that it reaches this parser).
pub fn count<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<T>() {
        Ok(v) if digits => Ok(v),
        _ if text.starts_with('-') => Err(format!("{text} is negative: give 0 or more")),
        _ if digits => Err(format!("{text} is too large")),
        _ => Err(format!("{text:?} is not a whole number")),
    }
}

#[derive(Args, Clone, Debug)]
pub struct SizingArgs {
    /// Engine's session size in tokens [default: the model's maximum, or 8192]
    #[arg(long, value_parser = count::<u64>)]
    pub context: Option<u64>,
    /// Most concurrent streams [default: 1 + extra sessions, or 4 without --slot-contexts]
    #[arg(long, value_parser = count::<usize>)]
    pub parallel: Option<usize>,
    /// Extra sessions, e.g. `16384,4096x6` (items TOKENS or TOKENSxN)
    #[arg(long, env = "FLASHLANE_SLOT_CONTEXTS")]
    pub slot_contexts: Option<String>,
    /// Growth allowance at admission, in tokens
    #[arg(long, env = "FLASHLANE_SLOT_GROW", default_value_t = slots::DEFAULT_SLOT_GROW,
          value_parser = count::<u64>)]
    pub slot_grow: u64,
    /// Memory cap in GiB for weights and sessions [default: 70% of RAM; with --device cuda, 90%
    /// of the GPU's free memory]
    #[arg(long, env = "FLASHLANE_LOAD_LIMIT_GB")]
    pub load_limit_gb: Option<f64>,
    /// Memory in GiB for cached prompt prefixes, out of what the cap leaves after the weights
    /// and the sessions (never at their expense); 0 turns the cache off [default: half of it]
    #[arg(long, env = "FLASHLANE_PROMPT_CACHE_GB")]
    pub prompt_cache_gb: Option<f64>,
}

impl SizingArgs {
    /// Parses `--slot-contexts`; `max_tokens` is what the model can address.
    pub fn spec(&self, max_tokens: u64) -> Result<Option<SessionSpec>, Failure> {
        match &self.slot_contexts {
            None => Ok(None),
            Some(text) => SessionSpec::parse(text, max_tokens.min(u64::MAX - MARGIN))
                .map(Some)
                .map_err(Failure::bad_input),
        }
    }

    /// First free when no spec is set, smallest fit with the growth allowance otherwise.
    pub fn policy(&self, spec: Option<&SessionSpec>) -> Policy {
        match spec {
            None => Policy::FirstFree,
            Some(_) => Policy::SmallestFit {
                grow: self.slot_grow,
            },
        }
    }

    /// The memory cap in bytes on a GPU with `free_bytes` free: `--load-limit-gb` (no more than
    /// is free: the sessions would fail to allocate after the plan), or 90% of them.
    pub fn gpu_cap_bytes(&self, free_bytes: u64) -> Result<u64, Failure> {
        match self.load_limit_gb {
            Some(gb) => {
                let cap = self.cap_bytes()?;
                if cap > free_bytes {
                    return Err(Failure::bad_input(anyhow::anyhow!(
                        "--load-limit-gb {gb} is more than the GPU has free ({:.1} GiB)",
                        free_bytes as f64 / (1u64 << 30) as f64
                    )));
                }
                Ok(cap)
            }
            None => Ok((free_bytes as f64 * DEFAULT_GPU_LOAD_SHARE) as u64),
        }
    }

    /// The memory cap in bytes: `--load-limit-gb`, or 70% of the machine's memory.
    pub fn cap_bytes(&self) -> Result<u64, Failure> {
        match self.load_limit_gb {
            Some(gb) if gb.is_finite() && gb > 0.0 && gb <= LOAD_LIMIT_GB_MAX => {
                Ok((gb * (1u64 << 30) as f64) as u64)
            }
            Some(gb) => Err(Failure::bad_input(anyhow::anyhow!(
                "--load-limit-gb must be more than 0 and at most {LOAD_LIMIT_GB_MAX} GiB, got {gb}"
            ))),
            None => {
                let total = total_memory_bytes().map_err(Failure::from)?;
                Ok((total as f64 * DEFAULT_LOAD_SHARE) as u64)
            }
        }
    }
}

/// The machine's memory, from `/proc/meminfo`.
pub fn total_memory_bytes() -> anyhow::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| anyhow::anyhow!("cannot read /proc/meminfo ({e}); pass --load-limit-gb"))?;
    let kib = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .ok_or_else(|| anyhow::anyhow!("no MemTotal in /proc/meminfo; pass --load-limit-gb"))?;
    Ok(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizing(load_limit_gb: Option<f64>) -> SizingArgs {
        SizingArgs {
            context: None,
            parallel: None,
            slot_contexts: None,
            slot_grow: slots::DEFAULT_SLOT_GROW,
            load_limit_gb,
            prompt_cache_gb: None,
        }
    }

    #[test]
    fn the_prompt_cache_takes_what_the_sessions_leave_never_more() {
        const GIB: u64 = 1 << 30;
        let needs = PlanNeeds {
            per_token: 1024,
            fixed: 0,
            ready_bytes: GIB,
            max_tokens: Some(8192),
        };
        let mut args = sizing(Some(10.0));
        args.parallel = Some(2);
        args.context = Some(4096);
        let default = args.resolve(&needs, 10 * GIB).unwrap();
        let left = default.plan.room_bytes - default.plan.total_bytes;
        assert_eq!(
            default.prompt_cache_bytes,
            (left as f64 * DEFAULT_PROMPT_CACHE_SHARE) as u64
        );
        args.prompt_cache_gb = Some(0.0);
        assert_eq!(
            args.resolve(&needs, 10 * GIB).unwrap().prompt_cache_bytes,
            0
        );
        args.prompt_cache_gb = Some(2.0);
        let two = args.resolve(&needs, 10 * GIB).unwrap();
        assert_eq!(two.prompt_cache_bytes, 2 * GIB);
        assert_eq!(two.plan, default.plan, "the sessions are planned first");
        for bad in [9.5, -1.0, f64::NAN] {
            args.prompt_cache_gb = Some(bad);
            let error = args.resolve(&needs, 10 * GIB).err().expect("refused");
            assert_eq!(error.status, 2, "{bad}");
            assert!(
                format!("{:#}", error.error).contains("--prompt-cache-gb"),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_gpu_cap_is_a_share_of_its_free_memory_or_a_limit_that_fits_in_it() {
        const GIB: u64 = 1 << 30;
        assert_eq!(
            sizing(None).gpu_cap_bytes(100 * GIB).unwrap(),
            (100.0 * GIB as f64 * DEFAULT_GPU_LOAD_SHARE) as u64
        );
        assert_eq!(
            sizing(Some(64.0)).gpu_cap_bytes(100 * GIB).unwrap(),
            64 * GIB
        );
        let refused = sizing(Some(120.0)).gpu_cap_bytes(100 * GIB).unwrap_err();
        assert!(
            format!("{refused:?}").contains("more than the GPU has free"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_load_limit_out_of_range_says_the_range() {
        for bad in [0.0, -1.0, 1e12, f64::NAN] {
            let refused = format!("{:?}", sizing(Some(bad)).cap_bytes().unwrap_err());
            assert!(refused.contains("at most 1000000 GiB"), "{bad}: {refused}");
        }
        assert_eq!(sizing(Some(2.0)).cap_bytes().unwrap(), 2 << 30);
    }
}

/// What a model asks of the sessions' plan.
#[derive(Clone, Copy, Debug)]
pub struct PlanNeeds {
    /// KV bytes per position of a session.
    pub per_token: u64,
    /// Bytes a session costs whatever its size.
    pub fixed: u64,
    /// Bytes taken before any session (the weights).
    pub ready_bytes: u64,
    /// Positions the model addresses (`None`: unknown, sessions sized by hand).
    pub max_tokens: Option<u64>,
}

/// A plan of sessions under the cap, as `serve` opens them and `plan` prints them.
pub struct Sizing {
    pub plan: Plan,
    /// The extra sessions asked for (`--slot-contexts`), if any.
    pub spec: Option<SessionSpec>,
    /// The prompt cache's budget, from the room the sessions left.
    pub prompt_cache_bytes: u64,
}

impl SizingArgs {
    /// The one sizing resolution of `serve` and `plan`: the engine's session (`--context`, else
    /// the model's maximum, else [`DEFAULT_CONTEXT`]; refused past what the model addresses),
    /// the extra sessions, and the plan of them all under `cap_bytes`.
    pub fn resolve(&self, needs: &PlanNeeds, cap_bytes: u64) -> Result<Sizing, Failure> {
        let addressed = needs.max_tokens.filter(|&m| m > 0);
        let spec = self.spec(needs.max_tokens.unwrap_or(u64::MAX))?;
        let context = self.context.unwrap_or(addressed.unwrap_or(DEFAULT_CONTEXT));
        if let Some(max) = addressed.filter(|&m| context > m) {
            return Err(Failure::bad_input(anyhow::anyhow!(
                "--context {context} is more than the model addresses ({max} positions)"
            )));
        }
        let plan = slots::plan(&slots::PlanInput {
            context_tokens: context,
            parallel: self.parallel,
            spec: spec.as_ref(),
            bytes_per_token: needs.per_token,
            fixed_state_bytes: needs.fixed,
            cap_bytes,
            ready_bytes: needs.ready_bytes,
            margin_bytes: MEMORY_MARGIN_BYTES,
            reserved_bytes: 0,
        })
        .map_err(|e| Failure::from(anyhow::anyhow!(e)))?;
        let prompt_cache_bytes = self.prompt_cache_bytes(&plan)?;
        Ok(Sizing {
            plan,
            spec,
            prompt_cache_bytes,
        })
    }

    /// The prompt cache's budget: `--prompt-cache-gb`, which must fit in what the sessions left
    /// under the cap, or [`DEFAULT_PROMPT_CACHE_SHARE`] of that.
    pub fn prompt_cache_bytes(&self, plan: &Plan) -> Result<u64, Failure> {
        let left = plan.room_bytes.saturating_sub(plan.total_bytes);
        const GIB: f64 = (1u64 << 30) as f64;
        match self.prompt_cache_gb {
            None => Ok((left as f64 * DEFAULT_PROMPT_CACHE_SHARE) as u64),
            Some(gb) if !(gb.is_finite() && gb >= 0.0) => Err(Failure::bad_input(anyhow::anyhow!(
                "--prompt-cache-gb must be a number of GiB, 0 or more, got {gb}"
            ))),
            Some(gb) if gb * GIB > left as f64 => Err(Failure::bad_input(anyhow::anyhow!(
                "--prompt-cache-gb {gb} is more than the {:.2} GiB the cap leaves after the \
                 weights and the sessions; lower it, open fewer sessions or raise --load-limit-gb",
                left as f64 / GIB
            ))),
            Some(gb) => Ok((gb * GIB) as u64),
        }
    }
}

/// The prompt cache's line of `plan` and `serve`.
pub fn prompt_cache_line(bytes: u64) -> String {
    if bytes == 0 {
        "prompt cache: off\n".to_string()
    } else {
        format!(
            "prompt cache: up to {} (blocks of prefill chunks, least recently used evicted)\n",
            human_bytes(bytes)
        )
    }
}

/// The sessions of a plan, one line each, and its totals (what `plan` prints and `serve` logs).
pub fn table(plan: &Plan) -> String {
    let mut out = format!("{:>3}  {:>10}  {:>12}\n", "#", "capacity", "memory");
    for (idx, session) in plan.sessions.iter().enumerate() {
        let role = if idx == 0 { "  (engine's session)" } else { "" };
        out += &format!(
            "{idx:>3}  {:>10}  {:>12}{role}\n",
            session.capacity,
            human_bytes(session.bytes)
        );
    }
    out += &format!(
        "{} sessions, {} of {} room under a cap of {}\n",
        plan.sessions.len(),
        human_bytes(plan.total_bytes),
        human_bytes(plan.room_bytes),
        human_bytes(plan.cap_bytes)
    );
    out
}

pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}
