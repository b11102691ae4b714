//! The sparse MoE with a gated shared expert (models.md "Sparse MoE").
//!
//! Router: `softmax(gate·x)` in f32 over all experts, top-k by probability (ties to the lower
//! index, as `torch.topk`), renormalised when `norm_topk_prob`. Per row:
//! `Σ_e p_e·down_e(silu(gate_e x) ⊙ up_e x)` summed in ascending expert index (transformers'
//! order), plus `sigmoid(shared_expert_gate·x)·shared_expert(x)`. Rows are gathered per expert
//! for the matmuls (experts in parallel); a row's arithmetic does not depend on which other rows
//! share its experts. Expert weights are read in either checkpoint layout.

use crate::kernels::activation::{sigmoid, swiglu};
use crate::kernels::matmul::matmul_rows;
use crate::layers::Mlp;
use crate::linear::{DenseMlp, Linear};
use model::schema::names;
use model::{Config, LoadError, MatmulInput, Tensor, Weights};
use rayon::prelude::*;

/// Expert weights as the checkpoint stores them.
enum Experts {
    /// `experts.{e}.{gate,up,down}_proj.weight`.
    Separate(Vec<DenseMlp>),
    /// `experts.gate_up_proj` `[E, 2I, H]` (gate rows, then up rows) and `experts.down_proj`
    /// `[E, H, I]`.
    Fused { gate_up: Tensor, down: Tensor },
}

pub struct SparseMoe {
    router: Linear,
    experts: Experts,
    num_experts: usize,
    top_k: usize,
    norm_topk_prob: bool,
    hidden: usize,
    width: usize,
    /// The shared expert and its `[1, H]` gate, when the model has one.
    shared: Option<(DenseMlp, Linear)>,
    /// What x is multiplied as in the fused experts' matmuls (the separate ones' [`Linear`]s
    /// carry their own).
    input: MatmulInput,
}

impl SparseMoe {
    /// The router, the experts (either layout), the shared expert and its gate, as `mlp` names
    /// them.
    pub fn load(w: &Weights, config: &Config, mlp: &names::Mlp) -> Result<SparseMoe, LoadError> {
        let m = config
            .moe
            .as_ref()
            .expect("a MoE layer needs the MoE config");
        let (h, e, i) = (config.hidden_size, m.num_experts, m.expert_intermediate);
        let fused = mlp.fused_gate_up();
        let experts = if w.contains(&fused) {
            Experts::Fused {
                gate_up: w.tensor(&fused, &[e, 2 * i, h])?,
                down: w.tensor(&mlp.fused_down(), &[e, h, i])?,
            }
        } else {
            Experts::Separate(
                (0..e)
                    .map(|x| DenseMlp::load(w, &mlp.expert(x), h, i))
                    .collect::<Result<_, _>>()?,
            )
        };
        let shared = if m.shared_expert_intermediate > 0 {
            Some((
                DenseMlp::load(w, &mlp.shared_expert(), h, m.shared_expert_intermediate)?,
                Linear::load(w, &mlp.shared_expert_gate(), 1, h, false)?,
            ))
        } else {
            None
        };
        Ok(SparseMoe {
            router: Linear::load(w, &mlp.router(), e, h, false)?,
            experts,
            num_experts: e,
            top_k: m.experts_per_token,
            norm_topk_prob: m.norm_topk_prob,
            hidden: h,
            width: i,
            shared,
            input: w.matmul_input(),
        })
    }

    /// Expert `e` over `x` (`[n, hidden]` gathered rows).
    fn expert(&self, e: usize, x: &[f32]) -> Vec<f32> {
        let (h, i) = (self.hidden, self.width);
        let n = x.len() / h;
        let mut y = vec![0f32; n * h];
        match &self.experts {
            Experts::Separate(list) => list[e].forward(x, &mut y),
            Experts::Fused { gate_up, down } => {
                let (mut g, mut u) = (vec![0f32; n * i], vec![0f32; n * i]);
                let input = self.input;
                let (gate, up) = (e * 2 * i..e * 2 * i + i, e * 2 * i + i..(e + 1) * 2 * i);
                matmul_rows(x, gate_up.data(), h, gate, &mut g, input);
                matmul_rows(x, gate_up.data(), h, up, &mut u, input);
                swiglu(&mut g, &u);
                matmul_rows(&g, down.data(), i, e * h..(e + 1) * h, &mut y, input);
            }
        }
        y
    }
}

impl Mlp for SparseMoe {
    fn forward(&self, xn: &[f32], out: &mut [f32]) {
        let h = self.hidden;
        let rows = xn.len() / h;
        // 1. Routes: top-k experts of each row, sorted by expert index.
        let logits = self.router.forward(xn);
        let routes: Vec<Vec<(usize, f32)>> = logits
            .chunks_exact(self.num_experts)
            .map(|l| top_k_softmax(l, self.top_k, self.norm_topk_prob))
            .collect();
        // 2. Each expert once over the rows routed to it.
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); self.num_experts];
        for (r, route) in routes.iter().enumerate() {
            for (e, _) in route {
                members[*e].push(r);
            }
        }
        let outputs: Vec<Vec<f32>> = members
            .par_iter()
            .enumerate()
            .map(|(e, rs)| {
                if rs.is_empty() {
                    return Vec::new();
                }
                let gathered: Vec<f32> = rs
                    .iter()
                    .flat_map(|r| xn[r * h..(r + 1) * h].iter().copied())
                    .collect();
                self.expert(e, &gathered)
            })
            .collect();
        // 3. Per row, in ascending expert index: Σ p·expert, then the gated shared expert.
        let mut slot = vec![0usize; self.num_experts];
        let shared = self.shared.as_ref().map(|(mlp, gate)| {
            let mut s = vec![0f32; rows * h];
            mlp.forward(xn, &mut s);
            (s, gate.forward(xn))
        });
        out.fill(0.0);
        for (r, route) in routes.iter().enumerate() {
            let y = &mut out[r * h..(r + 1) * h];
            for &(e, p) in route {
                // Rows were gathered in row order, so this row is the expert's next one.
                let j = slot[e];
                debug_assert_eq!(members[e][j], r, "expert {e}: gathered rows out of order");
                slot[e] += 1;
                for (yi, oi) in y.iter_mut().zip(&outputs[e][j * h..(j + 1) * h]) {
                    *yi += p * oi;
                }
            }
            if let Some((s, g)) = &shared {
                let gate = sigmoid(g[r]);
                for (yi, si) in y.iter_mut().zip(&s[r * h..(r + 1) * h]) {
                    *yi += gate * si;
                }
            }
        }
    }
}

/// Softmax of `logits` in f32, the `k` most probable (ties: lower index first), renormalised to
/// sum 1 when `renormalise`; returned in ascending expert index.
pub fn top_k_softmax(logits: &[f32], k: usize, renormalise: bool) -> Vec<(usize, f32)> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|a, b| exps[*b].total_cmp(&exps[*a]).then(a.cmp(b)));
    let mut top: Vec<(usize, f32)> = order[..k].iter().map(|&e| (e, exps[e] / sum)).collect();
    if renormalise {
        let s: f32 = top.iter().map(|(_, p)| p).sum();
        top.iter_mut().for_each(|(_, p)| *p /= s);
    }
    top.sort_by_key(|(e, _)| *e);
    top
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::activation::silu;
    use crate::kernels::matmul::matmul_reference;
    use crate::kernels::testutil::{max_abs_diff, Rng};

    fn tensor(rng: &mut Rng, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32("w", shape, rng.vec(n).iter().map(|v| 0.4 * v).collect())
    }

    fn lin(t: Tensor) -> Linear {
        let (o, i) = (t.shape()[0], t.shape()[1]);
        Linear {
            weight: t,
            interleaved: false,
            bias: None,
            in_features: i,
            out_features: o,
            input: MatmulInput::Exact,
        }
    }

    fn copy(t: &Tensor) -> Tensor {
        Tensor::from_f32(t.name(), t.shape().to_vec(), t.to_f32_vec())
    }

    fn mlp(g: Tensor, u: Tensor, d: Tensor) -> DenseMlp {
        DenseMlp {
            gate_proj: lin(g),
            up_proj: lin(u),
            down_proj: lin(d),
        }
    }

    /// The same random MoE in both expert layouts.
    fn random_pair(
        rng: &mut Rng,
        h: usize,
        e: usize,
        i: usize,
        k: usize,
        norm: bool,
    ) -> (SparseMoe, SparseMoe) {
        let w: Vec<[Tensor; 3]> = (0..e)
            .map(|_| {
                [
                    tensor(rng, vec![i, h]),
                    tensor(rng, vec![i, h]),
                    tensor(rng, vec![h, i]),
                ]
            })
            .collect();
        let router = tensor(rng, vec![e, h]);
        let sh = [
            tensor(rng, vec![6, h]),
            tensor(rng, vec![6, h]),
            tensor(rng, vec![h, 6]),
        ];
        let sg = tensor(rng, vec![1, h]);
        let (mut gate_up, mut down) = (Vec::new(), Vec::new());
        for [g, u, d] in &w {
            gate_up.extend(g.to_f32_vec());
            gate_up.extend(u.to_f32_vec());
            down.extend(d.to_f32_vec());
        }
        let make = |experts: Experts| SparseMoe {
            router: lin(copy(&router)),
            experts,
            num_experts: e,
            top_k: k,
            norm_topk_prob: norm,
            hidden: h,
            width: i,
            shared: Some((
                mlp(copy(&sh[0]), copy(&sh[1]), copy(&sh[2])),
                lin(copy(&sg)),
            )),
            input: MatmulInput::Exact,
        };
        let separate = Experts::Separate(
            w.iter()
                .map(|[g, u, d]| mlp(copy(g), copy(u), copy(d)))
                .collect(),
        );
        let fused = Experts::Fused {
            gate_up: Tensor::from_f32("gu", vec![e, 2 * i, h], gate_up),
            down: Tensor::from_f32("d", vec![e, h, i], down),
        };
        (make(separate), make(fused))
    }

    /// Every row through its experts one by one, f64 softmax.
    fn reference(m: &SparseMoe, x: &[f32]) -> Vec<f32> {
        let h = m.hidden;
        let Experts::Separate(list) = &m.experts else {
            panic!("reference wants separate experts")
        };
        let ffn = |d: &DenseMlp, xr: &[f32]| {
            let g = matmul_reference(xr, d.gate_proj.weight.data(), h);
            let u = matmul_reference(xr, d.up_proj.weight.data(), h);
            let a: Vec<f32> = g.iter().zip(&u).map(|(g, u)| silu(*g) * u).collect();
            matmul_reference(&a, d.down_proj.weight.data(), a.len())
        };
        let logits = matmul_reference(x, m.router.weight.data(), h);
        let mut y = vec![0f32; x.len()];
        for (r, l) in logits.chunks_exact(m.num_experts).enumerate() {
            let mx = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let z: f64 = l.iter().map(|v| (*v as f64 - mx).exp()).sum();
            let mut p: Vec<(usize, f64)> = l
                .iter()
                .enumerate()
                .map(|(i, v)| (i, (*v as f64 - mx).exp() / z))
                .collect();
            p.sort_by(|a, b| b.1.total_cmp(&a.1));
            p.truncate(m.top_k);
            let s: f64 = p.iter().map(|x| x.1).sum();
            let xr = &x[r * h..(r + 1) * h];
            for (e, pe) in p {
                let pe = if m.norm_topk_prob { pe / s } else { pe };
                for (yi, oi) in y[r * h..(r + 1) * h].iter_mut().zip(ffn(&list[e], xr)) {
                    *yi += (pe * oi as f64) as f32;
                }
            }
            let (sm, sg) = m.shared.as_ref().unwrap();
            let gate = sigmoid(matmul_reference(xr, sg.weight.data(), h)[0]);
            for (yi, oi) in y[r * h..(r + 1) * h].iter_mut().zip(ffn(sm, xr)) {
                *yi += gate * oi;
            }
        }
        y
    }

    fn run(m: &SparseMoe, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; x.len()];
        m.forward(x, &mut y);
        y
    }

    #[test]
    fn moe_matches_the_per_row_definition_in_both_expert_layouts() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let (h, e, i) = (16, 6, 8);
        let k = 1 + (rng.next_u64() % 3) as usize;
        let rows = 1 + (rng.next_u64() % 10) as usize;
        let x = rng.vec(rows * h);
        for norm in [false, true] {
            let (separate, fused) = random_pair(&mut rng, h, e, i, k, norm);
            let want = reference(&separate, &x);
            let got = run(&separate, &x);
            assert!(
                max_abs_diff(&got, &want) < 1e-4,
                "seed {seed}: {}",
                max_abs_diff(&got, &want)
            );
            assert_eq!(
                got,
                run(&fused, &x),
                "seed {seed}: fused and separate layouts differ"
            );
        }
    }

    /// The rows of `x` through `m` together; asserts each row gets the same bits alone.
    fn each_row_as_alone(m: &SparseMoe, x: &[f32], what: &str) -> Vec<f32> {
        let h = m.hidden;
        let all = run(m, x);
        for r in 0..x.len() / h {
            assert_eq!(
                run(m, &x[r * h..(r + 1) * h]),
                all[r * h..(r + 1) * h],
                "{what}: row {r}"
            );
        }
        all
    }

    #[test]
    fn a_row_gets_the_same_bits_whatever_is_routed_beside_it() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let (h, e, i) = (16, 8, 8);
        let (m, _) = random_pair(&mut rng, h, e, i, 2, true);
        let rows = 2 + (rng.next_u64() % 8) as usize;
        each_row_as_alone(&m, &rng.vec(rows * h), &format!("seed {seed}"));
    }

    #[test]
    fn a_row_of_model_width_gets_its_bits_alone_among_few_or_many_rows() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        // Experts wider than a column block of the matmul, and rows per expert from 1 to 12
        // (2 rows: decode-like; 24 rows: prompt-like, over the AVX2 tiles' 4 rows).
        let (h, e, i) = (72, 4, 144);
        let (m, _) = random_pair(&mut rng, h, e, i, 2, true);
        for rows in [2, 24] {
            let x = rng.vec(rows * h);
            let all = each_row_as_alone(&m, &x, &format!("seed {seed} rows {rows}"));
            let d = max_abs_diff(&all, &reference(&m, &x));
            assert!(d < 1e-3, "seed {seed} rows {rows}: {d}");
        }
    }

    #[test]
    fn top_k_takes_the_most_probable_renormalises_and_sorts_by_expert() {
        let got = top_k_softmax(&[0.0, 3.0, 1.0, 3.0, -2.0], 3, true);
        assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!((got.iter().map(|x| x.1).sum::<f32>() - 1.0).abs() < 1e-6);
        let raw = top_k_softmax(&[0.0, 3.0, 1.0, 3.0, -2.0], 2, false);
        assert_eq!(raw.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3]);
        assert!(raw.iter().map(|x| x.1).sum::<f32>() < 1.0);
    }
}
