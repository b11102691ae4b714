//! Each layer type on the GPU against backend-cpu's (the reference verified against
//! transformers) on random normed rows, through the same `Pass` a round uses: of
//! `models/flashlane-tiny`, the Gated DeltaNet mixer (conv and recurrence kernels), the gated
//! attention mixer (prep and attention kernels) and the sparse MoE (up and down kernels); of a
//! dense Qwen3 fixture, its attention (plain QK-norm, full RoPE, no gate) and SwiGLU MLP. Skips
//! without a CUDA device.

use super::*;
use backend_cpu::layers::Segment;
use backend_cpu::CpuModel;

/// Largest difference allowed relative to the largest reference magnitude: f32 sums in other
/// orders and the device's exp, nothing more.
const TOLERANCE: f32 = 1e-4;

fn relative_diff(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    got.iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

/// Uniform values in [-2, 2), seeded from the clock (printed on failure).
fn random_rows(n: usize) -> (u64, Vec<f32>) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut state = seed;
    let values = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    (seed, values)
}

#[test]
fn every_layer_type_matches_backend_cpu_on_random_rows() {
    layers_match_backend_cpu("../../models/flashlane-tiny");
}

#[test]
fn dense_qwen3_layers_match_backend_cpu_on_random_rows() {
    layers_match_backend_cpu("../../tests/fixtures/qwen3_bf16/model");
}

/// Every layer of the model in `dir` (relative to this crate) against backend-cpu's.
fn layers_match_backend_cpu(dir: &str) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
    // f32 cache rows: the CPU's are f32, and the comparison is of the arithmetic.
    let options = crate::LoadOptions {
        kv_dtype: model::KvDtype::F32,
        ..Default::default()
    };
    let gm = match CudaModel::load_with(&dir, &options) {
        Ok(m) => m,
        Err(CudaError::Unavailable(why)) => {
            crate::skip_without_gpu(&why);
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let cm = CpuModel::load(&dir, false).expect("CPU model");
    let (h, rows, capacity) = (gm.config.hidden_size, 7, 64);
    let (seed, xn) = random_rows(rows * h);
    let zeros = vec![0f32; rows * h];
    let sessions = Sessions::new(
        &gm.gpu,
        &gm.config,
        &[capacity as u64],
        false,
        crate::RollbackWindow::MAX,
        gm.kv_dtype(),
    )
    .unwrap();
    let mut scratch = Scratch::new(&gm).unwrap();
    let plans = [RoundWindow {
        session: 0,
        start: 0,
        len: rows,
        num_logits: 0,
    }];
    let rm = round_meta(&plans, &vec![0; rows], &sessions, false, None);
    let ptrs = scratch.ensure(&gm, rows, 0).unwrap();
    let base = scratch.upload(&gm.gpu, &rm.meta).unwrap();
    let pass = Pass { m: &gm, p: ptrs };
    let (mut linear, mut attn) = (0, 0);
    for (i, (gl, cl)) in gm.weights.layers.iter().zip(&cm.layers).enumerate() {
        let mix = match gl.mixer {
            MixerWeights::Linear(_) => {
                linear += 1;
                MixerRows::Linear {
                    segs: at(base, rm.segs),
                    windows: 1,
                    layer_off: (linear - 1) * sessions.lin_layer,
                }
            }
            MixerWeights::Attention(_) => {
                attn += 1;
                MixerRows::Attention(AttentionRows {
                    rows,
                    pos: at(base, rm.pos),
                    kv_base: at(base, rm.kv_base),
                    k_cache: sessions.kv[attn - 1].k.at(0),
                    v_cache: sessions.kv[attn - 1].v.at(0),
                    one_row_a_session: false,
                    by_context: crate::kernels::ContextSplit::Process,
                })
            }
        };
        // The mixer: x = 0 + mixer(xn), from a fresh session.
        scratch.xn.write(&gm.gpu, &xn).unwrap();
        scratch.x.write(&gm.gpu, &zeros).unwrap();
        pass.mixer(gl, rows, &mix, &sessions, super::LayerInput::Normed)
            .unwrap();
        let got = scratch.x.read(&gm.gpu, rows * h).unwrap();
        let mut state = cm.new_session(capacity, crate::RollbackWindow::MAX);
        let mut segments = [Segment {
            rows: 0..rows,
            start: 0,
            state: &mut state,
        }];
        let mut want = vec![0f32; rows * h];
        cl.mixer.forward(i, &xn, &mut segments, &mut want);
        let d = relative_diff(&got, &want);
        assert!(
            d <= TOLERANCE,
            "seed {seed}, layer {i} mixer: relative diff {d}"
        );
        // The feed-forward: x = 0 + ffn(xn).
        scratch.x.write(&gm.gpu, &zeros).unwrap();
        // (The norm after it into `hidden`, which nothing here reads.)
        let then = super::Then {
            w: &gl.input_norm,
            out: pass.p.hidden,
            deferrable: false,
        };
        pass.ffn(&gl.ffn, rows, super::LayerInput::Normed, then)
            .unwrap();
        let got = scratch.x.read(&gm.gpu, rows * h).unwrap();
        cl.mlp.forward(&xn, &mut want);
        // Rows whose router sits on a near-tie are left out: their experts may differ (each
        // side's choice is right for its logits), the rest must match.
        let routed = routed_clearly(&gm, &gl.ffn, &scratch, rows);
        let (got, want): (Vec<f32>, Vec<f32>) = got
            .chunks(h)
            .zip(want.chunks(h))
            .zip(&routed)
            .filter(|(_, &clear)| clear)
            .flat_map(|((g, w), _)| g.iter().copied().zip(w.iter().copied()))
            .unzip();
        let d = relative_diff(&got, &want);
        assert!(
            d <= TOLERANCE,
            "seed {seed}, layer {i} feed-forward: relative diff {d}"
        );
    }
}

/// Router logits closer than this (relative to their size) at the top-k boundary are a near-tie:
/// the GPU's logits carry ~16 bits of the input (see `matmul.cu`), the CPU's all 24.
const NEAR_TIE: f32 = 1e-4;

/// For each row of the last feed-forward pass: whether its k-th and (k+1)-th router logits (in
/// the front projection the pass left in `wide`) are clearly apart; every row of a dense MLP.
fn routed_clearly(gm: &CudaModel, ffn: &FfnWeights, scratch: &Scratch, rows: usize) -> Vec<bool> {
    let (FfnWeights::Moe(w), Some(m)) = (ffn, gm.config.moe.as_ref()) else {
        return vec![true; rows];
    };
    let width = w.front.rows;
    let mo = scratch.wide.read(&gm.gpu, rows * width).unwrap();
    mo.chunks(width)
        .map(|row| {
            let mut logits = row[..m.num_experts].to_vec();
            logits.sort_by(|a, b| b.total_cmp(a));
            if m.experts_per_token >= m.num_experts {
                return true;
            }
            let (kth, next) = (logits[m.experts_per_token - 1], logits[m.experts_per_token]);
            kth - next > NEAR_TIE * kth.abs().max(1.0)
        })
        .collect()
}
