//! Safetensors weights, memory-mapped: one `model.safetensors`, or shards listed by
//! `model.safetensors.index.json`.
//!
//! Every file's header is read and checked at [`Weights::open`] (a truncated file fails there,
//! naming the file). A tensor is fetched by name with the shape the graph expects
//! ([`Weights::tensor`]); a missing tensor, a shape mismatch or an unsupported dtype fails naming
//! the file and the tensor. bf16 and f32 tensors stay in the mapping (zero copy, bf16 stays
//! bf16), or with [`Placement::Resident`] are copied as they are into anonymous memory on huge
//! pages ([`crate::resident`]); f16 tensors are widened to f32 once at load.

use crate::resident::{Arena, HugeRegion};
use crate::schema::{checkpoint_tensors, declares_mtp, Init};
use crate::{Config, Fp8Blocks, LoadError, MatmulInput};
use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The index file of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The file of an unsharded checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";

/// Bytes between two touches when paging a tensor in: one byte per page is enough.
const PAGE_BYTES: usize = 4096;

/// Where one tensor lies in its file's mapping.
#[derive(Clone, Debug)]
struct Entry {
    file: Arc<PathBuf>,
    map: Arc<Mmap>,
    offset: usize,
    len: usize,
    dtype: Dtype,
    shape: Vec<usize>,
}

/// Where fetched bf16 and f32 tensors live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// In the file's mapping: zero copy, 4 KiB page-cache pages shared with other readers of
    /// the file (what a GPU backend wants: it uploads the weights once).
    #[default]
    Mapped,
    /// Copied into anonymous memory on 2 MiB transparent huge pages (what a CPU backend wants:
    /// it streams every weight once per decode step; see [`crate::resident`]).
    Resident,
}

/// Where a model's weights come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadFormat {
    /// The checkpoint's safetensors files.
    #[default]
    Safetensors,
    /// Seeded random values of the shapes `config.json` gives ([`Weights::dummy`]): real shapes
    /// served and measured without the files (vLLM's `--load-format dummy`).
    Dummy,
}

/// The seed of `--load-format dummy` weights: every load of a config makes the same model.
pub const DUMMY_SEED: u64 = 0x00f1_a5e1;

/// A tensor [`Weights::dummy`] makes when it is fetched.
#[derive(Clone, Debug)]
struct DummyEntry {
    shape: Vec<usize>,
    init: Init,
    seed: u64,
    /// Made as block-scaled FP8 with blocks of (rows, cols), as the config's quantisation says.
    fp8: Option<(usize, usize)>,
}

/// All tensors of a checkpoint, mapped (or, for dummy weights, made when fetched).
pub struct Weights {
    entries: HashMap<String, Entry>,
    dummy: HashMap<String, DummyEntry>,
    /// How `F8_E4M3` tensors are scaled (the directory's `config.json`), if it says.
    fp8: Option<Fp8Blocks>,
    total_bytes: u64,
    progress: Option<Mutex<LoadProgress>>,
    /// Where [`Placement::Resident`] copies go; `None` for [`Placement::Mapped`].
    arena: Option<Mutex<Arena>>,
    /// What the matmuls built from these weights multiply them by (the CPU backend's layers
    /// read it as they load, as they read [`Weights::placement`]).
    matmul_input: MatmulInput,
}

/// A tensor's elements, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum TensorData<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    /// Block-scaled FP8 kept as stored ([`Weights::tensor_kept`]): element `i` is
    /// [`Fp8Rows::get`], the value [`Weights::tensor`] dequantises it to.
    Fp8(Fp8Rows<'a>),
}

impl<'a> TensorData<'a> {
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(s) => s.len(),
            TensorData::Bf16(s) => s.len(),
            TensorData::Fp8(m) => m.q.len(),
        }
    }

    /// The rows `rows` of a matrix with rows of `cols` elements.
    pub fn rows(self, cols: usize, rows: std::ops::Range<usize>) -> TensorData<'a> {
        let elems = rows.start * cols..rows.end * cols;
        match self {
            TensorData::F32(s) => TensorData::F32(&s[elems]),
            TensorData::Bf16(s) => TensorData::Bf16(&s[elems]),
            TensorData::Fp8(m) => {
                assert_eq!(
                    cols, m.cols,
                    "[fp8-rows] rows of {} elements, not {cols}",
                    m.cols
                );
                TensorData::Fp8(m.rows(rows))
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` widened to f32.
    pub fn get(&self, i: usize) -> f32 {
        match self {
            TensorData::F32(s) => s[i],
            TensorData::Bf16(s) => s[i].to_f32(),
            TensorData::Fp8(m) => m.get(i),
        }
    }
}

/// Rows of a block-scaled FP8 matrix as stored, borrowed: the e4m3 bytes of the rows, and the
/// whole matrix's scales (`[rows / block_rows, cols / block_cols]`) with the index of the first
/// row here, so that a slice of rows finds its blocks' scales.
#[derive(Clone, Copy, Debug)]
pub struct Fp8Rows<'a> {
    pub q: &'a [u8],
    pub scales: &'a [f32],
    pub cols: usize,
    pub block_rows: usize,
    pub block_cols: usize,
    /// The matrix row that `q`'s first row is.
    pub first_row: usize,
}

impl<'a> Fp8Rows<'a> {
    /// The rows `rows` (indices into these rows).
    pub fn rows(self, rows: std::ops::Range<usize>) -> Fp8Rows<'a> {
        Fp8Rows {
            q: &self.q[rows.start * self.cols..rows.end * self.cols],
            first_row: self.first_row + rows.start,
            ..self
        }
    }

    /// The scales of row `r`'s blocks (`cols / block_cols` values).
    pub fn row_scales(&self, r: usize) -> &'a [f32] {
        let per_row = self.cols / self.block_cols;
        let b = (self.first_row + r) / self.block_rows;
        &self.scales[b * per_row..(b + 1) * per_row]
    }

    /// Element `i` (row-major): `e4m3(q[i]) · scale`, one f32 product, the value
    /// [`Weights::tensor`] dequantises it to.
    pub fn get(&self, i: usize) -> f32 {
        let (r, c) = (i / self.cols, i % self.cols);
        e4m3_value(self.q[i]) * self.row_scales(r)[c / self.block_cols]
    }

    /// Row `r` dequantised into `out` (`cols` values), as [`Fp8Rows::get`].
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        self.dequantise_row(r, &self.q[r * self.cols..(r + 1) * self.cols], out);
    }

    /// Row `r`'s bytes `q` (as stored, wherever a layout keeps them) dequantised into `out`
    /// with row `r`'s scales: `e4m3(q[j]) · scale`, one f32 product each.
    pub fn dequantise_row(&self, r: usize, q: &[u8], out: &mut [f32]) {
        let scales = self.row_scales(r);
        for ((o, b), j) in out.iter_mut().zip(q).zip(0..) {
            *o = e4m3_value(*b) * scales[j / self.block_cols];
        }
    }

    /// Every element dequantised, row-major (the values [`Weights::tensor`] gives).
    pub fn dequantised(&self) -> Vec<f32> {
        let mut values = vec![0f32; self.q.len()];
        for (r, row) in values.chunks_exact_mut(self.cols).enumerate() {
            self.row_into(r, row);
        }
        values
    }
}

#[derive(Debug)]
enum Storage {
    Mapped {
        map: Arc<Mmap>,
        offset: usize,
        len: usize,
        bf16: bool,
    },
    Resident {
        region: Arc<HugeRegion>,
        offset: usize,
        len: usize,
        bf16: bool,
    },
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
    /// Block-scaled FP8 as stored, owned ([`Weights::tensor_kept`]); boxed, so that a tensor
    /// stays the size of its other kinds.
    Fp8(Box<Fp8Matrix>),
}

/// One weight tensor, row-major, f32 or bf16 (or block-scaled FP8 where a backend keeps it so).
#[derive(Debug)]
pub struct Tensor {
    name: String,
    shape: Vec<usize>,
    storage: Storage,
}

impl Tensor {
    /// An owned f32 tensor (tests, and weights computed at load).
    pub fn from_f32(name: impl Into<String>, shape: Vec<usize>, data: Vec<f32>) -> Tensor {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "tensor shape vs data length"
        );
        Tensor {
            name: name.into(),
            shape,
            storage: Storage::F32(data),
        }
    }

    /// An owned bf16 tensor.
    pub fn from_bf16(name: impl Into<String>, shape: Vec<usize>, data: Vec<bf16>) -> Tensor {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "tensor shape vs data length"
        );
        Tensor {
            name: name.into(),
            shape,
            storage: Storage::Bf16(data),
        }
    }

    /// An owned block-scaled FP8 matrix, kept as stored.
    pub fn from_fp8(name: impl Into<String>, m: Fp8Matrix) -> Tensor {
        assert_eq!(
            m.q.len(),
            m.rows * m.cols,
            "[fp8-shape] bytes vs rows × cols"
        );
        assert_eq!(
            m.scales.len(),
            m.rows / m.block_rows * (m.cols / m.block_cols),
            "[fp8-shape] one scale per block"
        );
        Tensor {
            name: name.into(),
            shape: vec![m.rows, m.cols],
            storage: Storage::Fp8(Box::new(m)),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_bf16(&self) -> bool {
        matches!(
            self.storage,
            Storage::Bf16(_)
                | Storage::Mapped { bf16: true, .. }
                | Storage::Resident { bf16: true, .. }
        )
    }

    /// Whether this is a block-scaled FP8 matrix kept as stored.
    pub fn is_fp8(&self) -> bool {
        matches!(self.storage, Storage::Fp8(_))
    }

    /// Whether the elements live in anonymous memory advised to use huge pages.
    pub fn is_resident(&self) -> bool {
        matches!(self.storage, Storage::Resident { .. })
    }

    /// `parts` (`[out_i, in]` each, all bf16 or all f32) as one `[Σ out_i, in]` tensor, rows in
    /// order, in a region of its own on huge pages; `None` when the dtypes or the widths differ.
    pub fn concat_rows(
        name: impl Into<String>,
        parts: &[&Tensor],
    ) -> std::io::Result<Option<Tensor>> {
        let Some(first) = parts.first() else {
            return Ok(None);
        };
        if let Storage::Fp8(m) = &first.storage {
            return Ok(Tensor::concat_fp8(name, m, parts));
        }
        let bf16 = first.is_bf16();
        let inp = first.shape.last().copied().unwrap_or(0);
        if parts.iter().any(|p| {
            p.is_bf16() != bf16
                || p.shape.len() != 2
                || p.shape[1] != inp
                || matches!(p.storage, Storage::Fp8(_))
        }) {
            return Ok(None);
        }
        let out: usize = parts.iter().map(|p| p.shape[0]).sum();
        let bytes: Vec<&[u8]> = parts.iter().map(|p| p.bytes_of()).collect();
        let region = HugeRegion::filled(&bytes)?;
        let len = region_len(&bytes);
        for p in parts {
            p.release_source();
        }
        Ok(Some(Tensor {
            name: name.into(),
            shape: vec![out, inp],
            storage: Storage::Resident {
                region: Arc::new(region),
                offset: 0,
                len,
                bf16,
            },
        }))
    }

    /// FP8 `parts` (the first is `first`) as one owned FP8 matrix: bytes and scales row after row
    /// (each part is whole blocks of rows, as the load checked); `None` unless every part is FP8
    /// of `first`'s width and blocks.
    fn concat_fp8(name: impl Into<String>, first: &Fp8Matrix, parts: &[&Tensor]) -> Option<Tensor> {
        let mut q = Vec::new();
        let mut scales = Vec::new();
        let mut rows = 0;
        for p in parts {
            let Storage::Fp8(m) = &p.storage else {
                return None;
            };
            let same = (m.cols, m.block_rows, m.block_cols)
                == (first.cols, first.block_rows, first.block_cols);
            if !same || !m.rows.is_multiple_of(m.block_rows) {
                return None;
            }
            q.extend_from_slice(&m.q);
            scales.extend_from_slice(&m.scales);
            rows += m.rows;
        }
        Some(Tensor::from_fp8(
            name,
            Fp8Matrix {
                q,
                scales,
                rows,
                cols: first.cols,
                block_rows: first.block_rows,
                block_cols: first.block_cols,
            },
        ))
    }

    /// Drops the pages of a mapped tensor from this process's memory once they have been copied
    /// (the page cache keeps them, reclaimable; a later read faults them in again from the file),
    /// so that copying a checkpoint onto huge pages does not hold it twice: a 2.45 GB checkpoint
    /// peaked at 4.8 GB of resident memory without this. Owned tensors are left as they are.
    pub fn release_source(&self) {
        if let Storage::Mapped {
            map, offset, len, ..
        } = &self.storage
        {
            release_pages(map, *offset, *len);
        }
    }

    /// The elements' bytes as they are in memory.
    fn bytes_of(&self) -> &[u8] {
        match self.data() {
            // SAFETY: plain numbers; the slice covers exactly the elements' memory.
            TensorData::F32(s) => unsafe {
                std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s))
            },
            TensorData::Bf16(s) => unsafe {
                std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s))
            },
            TensorData::Fp8(m) => m.q,
        }
    }

    pub fn data(&self) -> TensorData<'_> {
        match &self.storage {
            Storage::F32(v) => TensorData::F32(v),
            Storage::Bf16(v) => TensorData::Bf16(v),
            Storage::Fp8(m) => TensorData::Fp8(m.view()),
            Storage::Mapped {
                map,
                offset,
                len,
                bf16,
            } => typed(&map[*offset..*offset + *len], *bf16),
            Storage::Resident {
                region,
                offset,
                len,
                bf16,
            } => typed(region.bytes(*offset, *len), *bf16),
        }
    }

    /// All elements widened to f32 (norm weights, biases: small tensors).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self.data() {
            TensorData::F32(s) => s.to_vec(),
            TensorData::Bf16(s) => s.iter().map(|v| v.to_f32()).collect(),
            TensorData::Fp8(m) => m.dequantised(),
        }
    }

    /// Bytes this tensor occupies in memory (an FP8 matrix's scales included).
    pub fn bytes(&self) -> usize {
        match &self.storage {
            Storage::Fp8(m) => m.q.len() + 4 * m.scales.len(),
            _ => self.numel() * if self.is_bf16() { 2 } else { 4 },
        }
    }
}

/// Drops the mapping's pages of `offset..offset + len` from this process's memory (a copy of
/// them is kept elsewhere; see [`Tensor::release_source`]).
fn release_pages(map: &Mmap, offset: usize, len: usize) {
    // SAFETY: the mapping is of a file, read-only: MADV_DONTNEED only unmaps its pages, and any
    // later access (a neighbouring tensor sharing a boundary page, or this one) reads the same
    // bytes back from the file. The result is advisory: ignored.
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
}

/// `bytes` as the elements they hold.
fn typed(bytes: &[u8], bf16: bool) -> TensorData<'_> {
    let elem = if bf16 { 2 } else { 4 };
    assert!(
        (bytes.as_ptr() as usize).is_multiple_of(elem) && bytes.len().is_multiple_of(elem),
        "tensor bytes not aligned to their elements"
    );
    // SAFETY: aligned and a whole number of elements (asserted); f32 and bf16 have no invalid
    // bit patterns; the slice borrows memory that lives as long as `bytes`.
    unsafe {
        if bf16 {
            TensorData::Bf16(std::slice::from_raw_parts(
                bytes.as_ptr().cast(),
                bytes.len() / 2,
            ))
        } else {
            TensorData::F32(std::slice::from_raw_parts(
                bytes.as_ptr().cast(),
                bytes.len() / 4,
            ))
        }
    }
}

fn region_len(parts: &[&[u8]]) -> usize {
    parts.iter().map(|p| p.len()).sum()
}

fn dtype_name(dtype: Dtype) -> String {
    format!("{dtype:?}")
}

impl Weights {
    /// Maps the checkpoint in `dir`: the shards of `model.safetensors.index.json` when present,
    /// else `model.safetensors`, else every `*.safetensors` file.
    pub fn open(dir: &Path) -> Result<Weights, LoadError> {
        let index_path = dir.join(INDEX_FILE);
        let (files, index) = if index_path.exists() {
            let (files, index) = read_index(&index_path)?;
            (
                files.into_iter().map(|f| dir.join(f)).collect::<Vec<_>>(),
                Some(index),
            )
        } else if dir.join(SINGLE_FILE).exists() {
            (vec![dir.join(SINGLE_FILE)], None)
        } else {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| LoadError::io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(LoadError::NoWeights {
                    dir: dir.to_path_buf(),
                });
            }
            (files, None)
        };

        let mut entries = HashMap::new();
        let mut total_bytes = 0u64;
        for path in files {
            let file = File::open(&path).map_err(|e| LoadError::io(&path, e))?;
            // SAFETY: the file is mapped read-only; flashlane never writes checkpoint files, and a
            // checkpoint changed by someone else while serving is outside what we can defend.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| LoadError::io(&path, e))?;
            let map = Arc::new(map);
            let path = Arc::new(path);
            let st = SafeTensors::deserialize(&map).map_err(|e| LoadError::Safetensors {
                file: path.to_path_buf(),
                reason: match first_bad_tensor(&map) {
                    Some(which) => format!("{e}: {which}"),
                    None => e.to_string(),
                },
            })?;
            let base = map.as_ptr() as usize;
            for (name, view) in st.tensors() {
                let data = view.data();
                let entry = Entry {
                    file: path.clone(),
                    map: map.clone(),
                    offset: data.as_ptr() as usize - base,
                    len: data.len(),
                    dtype: view.dtype(),
                    shape: view.shape().to_vec(),
                };
                total_bytes += data.len() as u64;
                if let Some(prev) = entries.insert(name.clone(), entry) {
                    return Err(LoadError::Inconsistent {
                        file: path.to_path_buf(),
                        reason: format!("tensor `{name}` is also in {}", prev.file.display()),
                    });
                }
            }
        }
        if let Some(index) = index {
            for (name, file) in &index {
                match entries.get(name) {
                    None => {
                        return Err(LoadError::MissingTensor {
                            name: name.clone(),
                            file: dir.join(file),
                        })
                    }
                    Some(e) if e.file.file_name() != Path::new(file).file_name() => {
                        return Err(LoadError::Inconsistent {
                            file: index_path.clone(),
                            reason: format!(
                                "tensor `{name}` is listed in {file} but found in {}",
                                e.file.display()
                            ),
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        // FP8 tensors are scaled as config.json's `quantization_config` says; a directory without
        // a (valid) config has none (an FP8 tensor then fails when fetched, saying why).
        let fp8 = std::fs::read_to_string(dir.join("config.json"))
            .ok()
            .and_then(|text| Config::from_json(&text).ok())
            .and_then(|c| c.fp8);
        Ok(Weights {
            entries,
            dummy: HashMap::new(),
            fp8,
            total_bytes,
            progress: None,
            arena: None,
            matmul_input: MatmulInput::Exact,
        })
    }

    /// The weights of `dir` as `format` says: its safetensors files, or dummy weights of the
    /// shapes its `config.json` gives.
    pub fn load(dir: &Path, format: LoadFormat) -> Result<Weights, LoadError> {
        match format {
            LoadFormat::Safetensors => Weights::open(dir),
            LoadFormat::Dummy => Ok(Weights::dummy(&Config::from_dir(dir)?, DUMMY_SEED)),
        }
    }

    /// A checkpoint of `config` (with its MTP head when the config declares one) whose bf16
    /// tensors are made from `seed` when fetched, of the kinds of values trained weights have
    /// ([`Init`]): activations stay finite and of order one, the router spreads tokens over the
    /// experts. The same config and seed make the same bits, whatever order tensors are fetched
    /// in and however many threads make them.
    pub fn dummy(config: &Config, seed: u64) -> Weights {
        let specs = checkpoint_tensors(config, declares_mtp(config));
        let mut total_bytes = 0u64;
        let dummy = specs
            .into_iter()
            .map(|s| {
                let fp8 = config
                    .fp8
                    .as_ref()
                    .filter(|b| dummy_quantises(&s.name, &s.shape, s.init, b))
                    .map(|b| (b.rows, b.cols));
                let numel = s.shape.iter().product::<usize>() as u64;
                total_bytes += match fp8 {
                    Some((r, c)) => numel + numel / (r * c) as u64 * 4,
                    None => numel * 2,
                };
                let entry = DummyEntry {
                    seed: mix(seed ^ name_hash(&s.name)),
                    shape: s.shape,
                    init: s.init,
                    fp8,
                };
                (s.name, entry)
            })
            .collect();
        Weights {
            entries: HashMap::new(),
            dummy,
            fp8: config.fp8.clone(),
            total_bytes,
            progress: None,
            arena: None,
            matmul_input: MatmulInput::Exact,
        }
    }

    /// The checkpoint without its MTP draft head (the `mtp.*` tensors): what a server that does
    /// not draft with the head loads, so that the head takes no memory and no time a step.
    pub fn without_mtp_head(mut self) -> Weights {
        let head = |name: &str| name.starts_with(crate::schema::MTP_PREFIX);
        let names: Vec<String> = self
            .entries
            .keys()
            .chain(self.dummy.keys())
            .filter(|n| head(n))
            .cloned()
            .collect();
        for name in names {
            let bytes = self.stored_bytes(&name).unwrap_or(0);
            self.total_bytes -= bytes;
            self.entries.remove(&name);
            self.dummy.remove(&name);
        }
        self
    }

    /// Whether the tensors are made up ([`Weights::dummy`]).
    pub fn is_dummy(&self) -> bool {
        !self.dummy.is_empty()
    }

    /// Where the tensors fetched from now on live ([`Placement::Mapped`] unless set).
    pub fn with_placement(mut self, placement: Placement) -> Weights {
        self.arena = match placement {
            Placement::Mapped => None,
            Placement::Resident => Some(Mutex::new(Arena::default())),
        };
        self
    }

    /// What the matmuls built from these weights multiply them by ([`MatmulInput::Exact`] unless
    /// set).
    pub fn with_matmul_input(mut self, input: MatmulInput) -> Weights {
        self.matmul_input = input;
        self
    }

    /// What the matmuls built from these weights multiply them by.
    pub fn matmul_input(&self) -> MatmulInput {
        self.matmul_input
    }

    /// Reports loading while tensors are fetched (and paged in): on a terminal a progress bar
    /// over the checkpoint's bytes (rate and time left), else (a log) one line per shard file as
    /// it completes and one at the end.
    pub fn with_progress(self, enabled: bool) -> Weights {
        use std::io::IsTerminal;
        self.with_progress_as(enabled, std::io::stderr().is_terminal())
    }

    /// [`Weights::with_progress`] with the kind of output chosen: a bar when `bar`, else lines.
    pub fn with_progress_as(mut self, enabled: bool, bar: bool) -> Weights {
        if !enabled {
            return self;
        }
        let mut shard_bytes: BTreeMap<PathBuf, u64> = BTreeMap::new();
        for e in self.entries.values() {
            *shard_bytes.entry(e.file.to_path_buf()).or_default() += e.len as u64;
        }
        let bar = bar.then(|| {
            let bar = indicatif::ProgressBar::new(self.total_bytes);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "loading weights {bar:40} {bytes}/{total_bytes} {bytes_per_sec} ({eta} left)",
                )
                .expect("a valid progress template"),
            );
            bar
        });
        self.progress = Some(Mutex::new(LoadProgress {
            bar,
            shards: shard_bytes.into_iter().map(|(f, b)| (f, (b, 0))).collect(),
            done_shards: 0,
            bytes: 0,
            total: self.total_bytes,
            started: std::time::Instant::now(),
            lines: Vec::new(),
        }));
        self
    }

    /// Ends the progress bar, or writes the closing line.
    pub fn finish_progress(&self) {
        if let Some(p) = &self.progress {
            p.lock().expect("progress lock").finish();
        }
    }

    /// The lines written so far instead of a bar (for tests).
    pub fn progress_lines(&self) -> Vec<String> {
        self.progress
            .as_ref()
            .map(|p| p.lock().expect("progress lock").lines.clone())
            .unwrap_or_default()
    }

    /// Counts `bytes` of `file` (none for dummy weights) as loaded.
    fn advance(&self, file: Option<&Path>, bytes: u64) {
        if let Some(p) = &self.progress {
            p.lock().expect("progress lock").advance(file, bytes);
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name) || self.dummy.contains_key(name)
    }

    /// The shape stored for `name`, if present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        match self.dummy.get(name) {
            Some(d) => Some(d.shape.as_slice()),
            None => self.entries.get(name).map(|e| e.shape.as_slice()),
        }
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .entries
            .keys()
            .chain(self.dummy.keys())
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names
    }

    /// The bytes `name` takes as stored (its FP8 scales are tensors of their own), if present.
    pub fn stored_bytes(&self, name: &str) -> Option<u64> {
        if let Some(d) = self.dummy.get(name) {
            let numel = d.shape.iter().product::<usize>() as u64;
            return Some(match d.fp8 {
                Some((r, c)) => numel + numel / (r * c) as u64 * 4,
                None => numel * 2,
            });
        }
        self.entries.get(name).map(|e| e.len as u64)
    }

    /// Total bytes of all tensors in the files.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes the tensors take once fetched as a backend that keeps FP8 ([`Weights::tensor_kept`])
    /// holds them: as stored, but f16 widened to f32 and FP8 scales in f32.
    pub fn fetched_bytes(&self) -> u64 {
        if self.is_dummy() {
            return self
                .dummy
                .values()
                .map(|d| {
                    let numel = d.shape.iter().product::<usize>() as u64;
                    match d.fp8 {
                        Some((r, c)) => numel + numel / (r * c) as u64 * 4,
                        None => numel * 2,
                    }
                })
                .sum();
        }
        self.entries
            .iter()
            .map(|(name, e)| {
                let numel = e.shape.iter().product::<usize>() as u64;
                match e.dtype {
                    Dtype::F8_E4M3 => numel,
                    Dtype::F16 => numel * 4,
                    // Kept beside their bytes as f32, whatever their stored dtype.
                    _ if name.ends_with(FP8_SCALE_SUFFIX) => numel * 4,
                    _ => e.len as u64,
                }
            })
            .sum()
    }

    /// Fetches `name`, checking that its shape is `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Tensor, LoadError> {
        self.place(self.fetch_checked(name, Some(shape))?)
    }

    /// [`Weights::tensor`] whatever the placement: in the file's mapping (or owned when it had
    /// to be converted: f16, misaligned). For tensors the caller copies or converts anyway
    /// (projections fused into one tensor, norm weights widened to f32), so that they are not
    /// also copied into the huge-page arena.
    pub fn tensor_mapped(&self, name: &str, shape: &[usize]) -> Result<Tensor, LoadError> {
        self.fetch_checked(name, Some(shape))
    }

    /// [`Weights::tensor`], but a block-scaled FP8 matrix kept as stored ([`TensorData::Fp8`],
    /// an owned copy of its bytes and scales) instead of dequantised to f32: for backends whose
    /// kernels read FP8.
    pub fn tensor_kept(&self, name: &str, shape: &[usize]) -> Result<Tensor, LoadError> {
        match self.fp8_matrix(name, shape)? {
            Some(m) => Ok(Tensor::from_fp8(name, m)),
            None => self.tensor(name, shape),
        }
    }

    /// [`Weights::tensor_kept`] whatever the placement ([`Weights::tensor_mapped`]).
    pub fn tensor_kept_mapped(&self, name: &str, shape: &[usize]) -> Result<Tensor, LoadError> {
        match self.fp8_matrix(name, shape)? {
            Some(m) => Ok(Tensor::from_fp8(name, m)),
            None => self.tensor_mapped(name, shape),
        }
    }

    /// `name`, its shape checked against `shape` when given: from the files, or made up.
    fn fetch_checked(&self, name: &str, shape: Option<&[usize]>) -> Result<Tensor, LoadError> {
        let Some(d) = self.dummy.get(name) else {
            return self.fetch(name, self.entry(name, shape)?);
        };
        if let Some(shape) = shape.filter(|s| *s != d.shape.as_slice()) {
            return Err(LoadError::Shape {
                file: self.files_hint(),
                name: name.to_string(),
                expected: shape.to_vec(),
                found: d.shape.clone(),
            });
        }
        if let Some(m) = dummy_fp8(d) {
            return Ok(Tensor::from_f32(
                name,
                d.shape.clone(),
                m.view().dequantised(),
            ));
        }
        let data = dummy_values(d);
        self.advance(None, data.len() as u64 * 2);
        Ok(Tensor::from_bf16(name, d.shape.clone(), data))
    }

    /// Whether fetched tensors are copied onto huge pages.
    pub fn placement(&self) -> Placement {
        match self.arena {
            Some(_) => Placement::Resident,
            None => Placement::Mapped,
        }
    }

    /// Where `name` lies, checking its shape against `shape` when given.
    fn entry(&self, name: &str, shape: Option<&[usize]>) -> Result<&Entry, LoadError> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| LoadError::MissingTensor {
                name: name.to_string(),
                file: self.files_hint(),
            })?;
        match shape {
            Some(shape) if entry.shape != shape => Err(LoadError::Shape {
                file: entry.file.to_path_buf(),
                name: name.to_string(),
                expected: shape.to_vec(),
                found: entry.shape.clone(),
            }),
            _ => Ok(entry),
        }
    }

    /// `t` where this checkpoint's placement wants it: copied into the huge-page arena for
    /// [`Placement::Resident`] unless it is already resident, as it is otherwise.
    pub fn place(&self, t: Tensor) -> Result<Tensor, LoadError> {
        let Some(arena) = &self.arena else {
            return Ok(t);
        };
        // FP8 matrices are owned copies already (bytes and scales together).
        if t.is_resident() || matches!(t.storage, Storage::Fp8(_)) {
            return Ok(t);
        }
        let bf16 = t.is_bf16();
        let copied = arena
            .lock()
            .expect("weight arena lock")
            .copy_in(t.bytes_of())
            .map_err(|e| {
                let why = format!(
                    "copying tensor `{}` into memory ({e}); `--mmap` keeps the weights in the file's mapping instead",
                    t.name()
                );
                LoadError::io(&self.files_hint(), std::io::Error::new(e.kind(), why))
            });
        t.release_source();
        let (region, offset) = copied?;
        Ok(Tensor {
            storage: Storage::Resident {
                region,
                offset,
                len: t.bytes(),
                bf16,
            },
            name: t.name,
            shape: t.shape,
        })
    }

    /// Fetches `name` whatever its shape (the caller checks it).
    pub fn tensor_any_shape(&self, name: &str) -> Result<Tensor, LoadError> {
        self.place(self.fetch_checked(name, None)?)
    }

    fn files_hint(&self) -> PathBuf {
        if self.is_dummy() {
            return PathBuf::from("(dummy weights)");
        }
        let mut files: Vec<&Path> = self.entries.values().map(|e| e.file.as_path()).collect();
        files.sort();
        files.dedup();
        match files.as_slice() {
            [one] => one.to_path_buf(),
            _ => files
                .first()
                .and_then(|f| f.parent())
                .map(|d| d.join("*.safetensors"))
                .unwrap_or_default(),
        }
    }

    /// `name` in the mapping (owned when it must be converted).
    fn fetch(&self, name: &str, entry: &Entry) -> Result<Tensor, LoadError> {
        let numel: usize = entry.shape.iter().product();
        let elem = match entry.dtype {
            Dtype::F32 => 4,
            Dtype::BF16 | Dtype::F16 => 2,
            Dtype::F8_E4M3 => 1,
            other => {
                return Err(LoadError::Dtype {
                    file: entry.file.to_path_buf(),
                    name: name.to_string(),
                    dtype: dtype_name(other),
                })
            }
        };
        if numel * elem != entry.len {
            return Err(LoadError::Inconsistent {
                file: entry.file.to_path_buf(),
                reason: format!(
                    "tensor `{name}` holds {} bytes but shape {:?} needs {}",
                    entry.len,
                    entry.shape,
                    numel * elem
                ),
            });
        }
        let bytes = &entry.map[entry.offset..entry.offset + entry.len];
        if self.progress.is_some() {
            // Paged in now, so that the report follows the reading of the file.
            let touched: u64 = bytes.iter().step_by(PAGE_BYTES).map(|b| *b as u64).sum();
            std::hint::black_box(touched);
            self.advance(Some(&entry.file), entry.len as u64);
        }
        let aligned = (bytes.as_ptr() as usize).is_multiple_of(elem);
        let storage = match entry.dtype {
            Dtype::F8_E4M3 => Storage::F32(self.dequantise_fp8(name, entry, bytes)?),
            Dtype::F32 if aligned => Storage::Mapped {
                map: entry.map.clone(),
                offset: entry.offset,
                len: entry.len,
                bf16: false,
            },
            Dtype::BF16 if aligned => Storage::Mapped {
                map: entry.map.clone(),
                offset: entry.offset,
                len: entry.len,
                bf16: true,
            },
            Dtype::F32 => Storage::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            Dtype::BF16 => Storage::Bf16(
                bytes
                    .chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            _ => Storage::F32(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
            ),
        };
        Ok(Tensor {
            name: name.to_string(),
            shape: entry.shape.clone(),
            storage,
        })
    }
}

/// Elements a thread makes in one go: each chunk has a seed of its own (the tensor's and its
/// index), so the values do not depend on how the chunks are spread over threads.
const DUMMY_CHUNK: usize = 1 << 16;

/// SplitMix64's finaliser: a well-mixed 64-bit value of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// FNV-1a of a tensor name (stable across runs and platforms, unlike `DefaultHasher`).
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The values of a dummy tensor, bf16 (see [`Init`]): four values from each 64-bit draw, each
/// uniform from 16 bits (finer than bf16's 8-bit mantissa resolves), so that an 80 GB model's
/// dummy weights take seconds to make, not minutes.
fn dummy_values(d: &DummyEntry) -> Vec<bf16> {
    use rayon::prelude::*;
    let n: usize = d.shape.iter().product();
    let mut out = vec![bf16::ZERO; n];
    let value = InitValue::of(d.init);
    out.par_chunks_mut(DUMMY_CHUNK)
        .enumerate()
        .for_each(|(chunk, values)| {
            let state = mix(d.seed ^ (chunk as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
            // One loop per kind of value: with `InitValue::at`'s branch inside it, the compiler
            // computed `ln` of every value and kept it only for A_log, and `ln` of the (mostly
            // negative) matrix values took its slow path: a third of a dummy load's time.
            if value.log {
                fill_uniform(values, state, |u| value.affine(u).ln());
            } else {
                fill_uniform(values, state, |u| value.affine(u));
            }
        });
    out
}

/// `values[j] = bf16(f(u_j))` for the uniforms in [0, 1) drawn from `state` (four a draw, 16 bits
/// each).
fn fill_uniform(values: &mut [bf16], mut state: u64, f: impl Fn(f32) -> f32) {
    for group in values.chunks_mut(4) {
        state = mix(state);
        for (i, v) in group.iter_mut().enumerate() {
            let u = ((state >> (16 * i)) & 0xffff) as f32 / 65536.0;
            *v = bf16::from_f32(f(u));
        }
    }
}

/// Whether dummy weights of an FP8 config make `name` FP8: the decoder layers' projections whose
/// shape is whole blocks, but not what `modules_to_not_convert` names, nor the MoE router and the
/// shared expert's gate (which the published FP8 checkpoints keep in bf16).
fn dummy_quantises(name: &str, shape: &[usize], init: Init, b: &Fp8Blocks) -> bool {
    let layer = name.starts_with("model.layers.") || name.starts_with("mtp.layers.");
    let gate = name.ends_with(".mlp.gate.weight") || name.ends_with(".shared_expert_gate.weight");
    let kept = b.not_converted.iter().any(|m| name.contains(m.as_str()));
    matches!(init, Init::Matrix { .. })
        && layer
        && !gate
        && !kept
        && matches!(shape, [r, c] if r % b.rows == 0 && c % b.cols == 0)
}

/// A dummy FP8 tensor's bytes and scales: e4m3 bytes uniform over the finite codes, and per
/// block a scale near `sqrt(1 / (fan_in · E[q²]))`, so that an output has about the variance of
/// one input (as [`Init::Matrix`]); `None` for a tensor made in bf16.
fn dummy_fp8(d: &DummyEntry) -> Option<Fp8Matrix> {
    use rayon::prelude::*;
    let (block_rows, block_cols) = d.fp8?;
    let [rows, cols] = d.shape[..] else {
        return None;
    };
    let fan_in = match d.init {
        Init::Matrix { fan_in } => fan_in,
        _ => cols,
    };
    let table = e4m3_table();
    let finite: Vec<f32> = table.iter().copied().filter(|v| v.is_finite()).collect();
    let mean_square = finite.iter().map(|v| v * v).sum::<f32>() / finite.len() as f32;
    let base = (1.0 / (fan_in as f32 * mean_square)).sqrt();
    let mut q = vec![0u8; rows * cols];
    q.par_chunks_mut(DUMMY_CHUNK)
        .enumerate()
        .for_each(|(chunk, bytes)| {
            let mut state = mix(d.seed ^ (chunk as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
            // Eight bytes from each 64-bit draw; each byte scaled onto the 254 finite codes
            // (nearly uniform: fine for made-up weights), skipping the NaNs 0x7f and 0xff.
            for group in bytes.chunks_mut(8) {
                state = mix(state);
                for (i, b) in group.iter_mut().enumerate() {
                    let code = ((((state >> (8 * i)) & 0xff) * 254) >> 8) as u8;
                    *b = if code >= 0x7f { code + 1 } else { code };
                }
            }
        });
    let n_scales = (rows / block_rows) * (cols / block_cols);
    let mut state = mix(d.seed ^ 0x5ca1e);
    let scales = (0..n_scales)
        .map(|_| {
            state = mix(state);
            base * (0.9 + 0.2 * ((state >> 40) as f32 / (1u32 << 24) as f32))
        })
        .collect();
    Some(Fp8Matrix {
        q,
        scales,
        rows,
        cols,
        block_rows,
        block_cols,
    })
}

/// How a value of the kind an [`Init`] describes is made from `u` uniform in [0, 1): an affine
/// map `scale · u + offset` (then `ln` for [`Init::ALog`]), its constants worked out once per
/// tensor rather than per value.
#[derive(Clone, Copy, Debug)]
struct InitValue {
    scale: f32,
    offset: f32,
    log: bool,
}

impl InitValue {
    fn of(init: Init) -> InitValue {
        // Uniform on [−a, a) has variance a²/3: a = sqrt(3 / fan_in) gives variance 1 / fan_in.
        let symmetric = |fan_in: usize| {
            let a = (3.0 / fan_in as f32).sqrt();
            (2.0 * a, -a)
        };
        let ((scale, offset), log) = match init {
            Init::Matrix { fan_in } => (symmetric(fan_in), false),
            Init::NormOne => ((0.1, 0.95), false),
            Init::NormZero => ((0.1, -0.05), false),
            // A_log = ln(1 + 15u): decays spread over [0, ln 16).
            Init::ALog => ((15.0, 1.0), true),
            Init::DtBias => ((1.0, -0.5), false),
            Init::Conv { kernel } => (symmetric(kernel), false),
            Init::Bias => ((0.0, 0.0), false),
        };
        InitValue { scale, offset, log }
    }

    /// `scale · u + offset`: the value itself, or (where `log`, [`Init::ALog`]) what its `ln` is
    /// taken of.
    fn affine(self, u: f32) -> f32 {
        self.scale * u + self.offset
    }
}

/// How loading is reported: a bar on a terminal, else a line per completed shard file.
struct LoadProgress {
    bar: Option<indicatif::ProgressBar>,
    /// Each file's bytes and those fetched so far.
    shards: BTreeMap<PathBuf, (u64, u64)>,
    done_shards: usize,
    bytes: u64,
    total: u64,
    started: std::time::Instant,
    /// The lines written (without a bar).
    lines: Vec<String>,
}

const GIB: f64 = (1u64 << 30) as f64;

/// `bytes` for a person: GiB from one GiB up, MiB below.
fn size(bytes: u64) -> String {
    let gib = bytes as f64 / GIB;
    if gib >= 1.0 {
        format!("{gib:.2} GiB")
    } else {
        format!("{:.1} MiB", gib * 1024.0)
    }
}

impl LoadProgress {
    fn advance(&mut self, file: Option<&Path>, bytes: u64) {
        self.bytes += bytes;
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
            return;
        }
        let Some((total, done)) = file.and_then(|f| self.shards.get_mut(f)) else {
            return;
        };
        let was_done = *done >= *total;
        *done += bytes;
        if was_done || *done < *total {
            return;
        }
        let total = *total;
        self.done_shards += 1;
        let name = file
            .and_then(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let line = format!(
            "loaded shard {}/{} {name} ({}); {} of {} at {:.2} GiB/s",
            self.done_shards,
            self.shards.len(),
            size(total),
            size(self.bytes),
            size(self.total),
            self.rate()
        );
        self.say(line);
    }

    fn rate(&self) -> f64 {
        self.bytes as f64 / GIB / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    fn finish(&mut self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None => {
                let line = format!(
                    "loaded {} of weights in {:.1} s ({:.2} GiB/s)",
                    size(self.bytes),
                    self.started.elapsed().as_secs_f64(),
                    self.rate()
                );
                self.say(line);
            }
        }
    }

    fn say(&mut self, line: String) {
        eprintln!("{line}");
        self.lines.push(line);
    }
}

/// A factor every FP8 block scale must stay finite times: the CPU multiplies block sums by
/// `scale · 2^8` (its widened weights are e4m3 / 2^8).
pub const FP8_SCALE_HEADROOM: f32 = 256.0;

/// What a block-scaled FP8 weight `X.weight` keeps its scales in: `X.weight_scale_inv` (the name
/// is DeepSeek's and Qwen's; the values multiply, despite the `inv`).
pub const FP8_SCALE_SUFFIX: &str = "_scale_inv";

/// A block-scaled FP8 matrix as stored: e4m3 bytes `[rows, cols]` and f32 scales
/// `[rows / block_rows, cols / block_cols]` (see [`Fp8Blocks`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Matrix {
    pub q: Vec<u8>,
    pub scales: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
    pub block_rows: usize,
    pub block_cols: usize,
}

impl Fp8Matrix {
    /// All its rows, borrowed.
    pub fn view(&self) -> Fp8Rows<'_> {
        Fp8Rows {
            q: &self.q,
            scales: &self.scales,
            cols: self.cols,
            block_rows: self.block_rows,
            block_cols: self.block_cols,
            first_row: 0,
        }
    }
}

impl Weights {
    /// Whether any tensor is stored as block-scaled FP8 (in the files, or made so by dummy
    /// weights): backends choose kernels for FP8 projections by it before they load a layer.
    pub fn has_fp8(&self) -> bool {
        self.dummy.values().any(|d| d.fp8.is_some())
            || self.entries.values().any(|e| e.dtype == Dtype::F8_E4M3)
    }

    /// Whether `name` is stored as block-scaled FP8 (in the files, or made so by dummy weights).
    pub fn is_fp8(&self, name: &str) -> bool {
        match self.dummy.get(name) {
            Some(d) => d.fp8.is_some(),
            None => self
                .entries
                .get(name)
                .is_some_and(|e| e.dtype == Dtype::F8_E4M3),
        }
    }

    /// `name` as its FP8 bytes and block scales when it is stored as block-scaled FP8 (checked as
    /// [`Weights::tensor`] checks it, shape included); `None` when it is stored otherwise. For
    /// backends that compute on FP8 weights directly.
    pub fn fp8_matrix(&self, name: &str, shape: &[usize]) -> Result<Option<Fp8Matrix>, LoadError> {
        if let Some(d) = self.dummy.get(name) {
            if d.shape != shape {
                return Err(LoadError::Shape {
                    file: self.files_hint(),
                    name: name.to_string(),
                    expected: shape.to_vec(),
                    found: d.shape.clone(),
                });
            }
            let m = dummy_fp8(d);
            if let Some(m) = &m {
                self.advance(None, m.q.len() as u64);
            }
            return Ok(m);
        }
        let entry = self.entry(name, Some(shape))?;
        if entry.dtype != Dtype::F8_E4M3 {
            return Ok(None);
        }
        let bytes = &entry.map[entry.offset..entry.offset + entry.len];
        let (scales, block_rows, block_cols) = self.fp8_scales(name, entry)?;
        refuse_fp8_nan(name, entry, bytes)?;
        self.advance(Some(&entry.file), entry.len as u64);
        let q = bytes.to_vec();
        // The copy is what the backend keeps: the mapped pages need not stay in this process
        // (a checkpoint would otherwise be held twice while it loads).
        release_pages(&entry.map, entry.offset, entry.len);
        Ok(Some(Fp8Matrix {
            q,
            scales,
            rows: entry.shape[0],
            cols: entry.shape[1],
            block_rows,
            block_cols,
        }))
    }

    /// The scales of the FP8 weight `name` (`{name}_scale_inv`), checked against its shape and
    /// the config's blocks: (scales, block rows, block cols).
    fn fp8_scales(&self, name: &str, entry: &Entry) -> Result<(Vec<f32>, usize, usize), LoadError> {
        let bad = |reason: String| LoadError::Inconsistent {
            file: entry.file.to_path_buf(),
            reason: format!("FP8 tensor `{name}`: {reason}"),
        };
        let Some(blocks) = &self.fp8 else {
            return Err(bad(
                "F8_E4M3 weights need config.json's `quantization_config` (quant_method fp8, \
                 weight_block_size) to be scaled"
                    .into(),
            ));
        };
        let [out, inp] = entry.shape[..] else {
            return Err(bad(format!(
                "shape {:?}: only matrices [out, in] are block-scaled",
                entry.shape
            )));
        };
        if !out.is_multiple_of(blocks.rows) || !inp.is_multiple_of(blocks.cols) {
            return Err(bad(format!(
                "shape [{out}, {inp}] is not a whole number of {}×{} blocks (weight_block_size)",
                blocks.rows, blocks.cols
            )));
        }
        let (br, bc) = (out / blocks.rows, inp / blocks.cols);
        let scale_name = format!("{name}{FP8_SCALE_SUFFIX}");
        let Some(scale_entry) = self.entries.get(&scale_name) else {
            return Err(LoadError::MissingTensor {
                name: scale_name,
                file: entry.file.to_path_buf(),
            });
        };
        if scale_entry.shape != [br, bc] {
            return Err(LoadError::Shape {
                file: scale_entry.file.to_path_buf(),
                name: scale_name,
                expected: vec![br, bc],
                found: scale_entry.shape.clone(),
            });
        }
        let scales = self.fetch(&scale_name, scale_entry)?.to_f32_vec();
        // The CPU's kernels scale a block's sum by `scale · 2^8` (backend-cpu's `matmul_fp8`):
        // finite for any scale a real checkpoint holds (they are block maxima / 448).
        if let Some(bad_scale) = scales
            .iter()
            .find(|s| !(*s * FP8_SCALE_HEADROOM).is_finite())
        {
            return Err(LoadError::Inconsistent {
                file: scale_entry.file.to_path_buf(),
                reason: format!(
                    "tensor `{scale_name}` holds the scale {bad_scale}: not a finite number \
                     (or one of at least 2^120, past any real weight's)"
                ),
            });
        }
        Ok((scales, blocks.rows, blocks.cols))
    }

    /// The f32 values of the FP8 weight `name` (`bytes`, e4m3), each times its block's scale
    /// (`{name}_scale_inv`): `W[o, i] = q[o, i] · scale[o / rows, i / cols]`, one f32 product, as
    /// transformers dequantises.
    fn dequantise_fp8(
        &self,
        name: &str,
        entry: &Entry,
        bytes: &[u8],
    ) -> Result<Vec<f32>, LoadError> {
        let (scales, block_rows, block_cols) = self.fp8_scales(name, entry)?;
        refuse_fp8_nan(name, entry, bytes)?;
        let rows = Fp8Rows {
            q: bytes,
            scales: &scales,
            cols: entry.shape[1],
            block_rows,
            block_cols,
            first_row: 0,
        };
        Ok(rows.dequantised())
    }
}

/// Refuses an FP8 weight holding a NaN code (`S.1111.111`): a NaN weight turns every output
/// it touches into NaN, so the checkpoint is corrupt; the error names the tensor and the first
/// such element.
fn refuse_fp8_nan(name: &str, entry: &Entry, bytes: &[u8]) -> Result<(), LoadError> {
    // A branch-free pass first (it vectorises: the whole tensor at memory speed), then the
    // position only when there is one.
    if !bytes.iter().fold(false, |any, b| any | (b & 0x7f == 0x7f)) {
        return Ok(());
    }
    let at = bytes.iter().position(|b| b & 0x7f == 0x7f).unwrap_or(0);
    let cols = entry.shape.get(1).copied().unwrap_or(1).max(1);
    Err(LoadError::Inconsistent {
        file: entry.file.to_path_buf(),
        reason: format!(
            "FP8 tensor `{name}` holds a NaN (byte {:#04x}) at [{}, {}]: not a usable weight",
            bytes[at],
            at / cols,
            at % cols
        ),
    })
}

/// The value of the e4m3 byte `b` (as [`e4m3_table`]): its bits moved into an f32's (sign to
/// the sign, exponent and mantissa to the bottom of the exponent field and the top of the
/// mantissa), then scaled by 2^120 (exact: the bias 127 − 7; e4m3's subnormals are f32
/// subnormals before it). The CPU's FP8 kernels widen this way, in registers.
#[inline(always)]
pub fn e4m3_value(b: u8) -> f32 {
    if b & 0x7f == 0x7f {
        return f32::NAN;
    }
    let bits = (u32::from(b & 0x80) << 24) | (u32::from(b & 0x7f) << 20);
    f32::from_bits(bits) * E4M3_BIAS_SHIFT
}

/// 2^120: the factor that turns an e4m3 byte's bits placed in an f32 ([`e4m3_value`]) into its
/// value.
const E4M3_BIAS_SHIFT: f32 = f32::from_bits((127 + 120) << 23);

/// The value of every e4m3 byte (OCP FP8 E4M3, "fn": 1 sign, 4 exponent bits of bias 7, 3
/// mantissa bits; no infinities, S.1111.111 is NaN).
pub fn e4m3_table() -> [f32; 256] {
    let mut table = [0f32; 256];
    for (b, v) in table.iter_mut().enumerate() {
        let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
        let exp = ((b >> 3) & 0xf) as i32;
        let man = (b & 0x7) as f32;
        *v = if exp == 0xf && b & 0x7 == 0x7 {
            f32::NAN
        } else if exp == 0 {
            sign * man / 8.0 * 2f32.powi(-6)
        } else {
            sign * (1.0 + man / 8.0) * 2f32.powi(exp - 7)
        };
    }
    table
}

/// Reads `model.safetensors.index.json`: the shard files (sorted) and the tensor → file map.
fn read_index(path: &Path) -> Result<(Vec<String>, BTreeMap<String, String>), LoadError> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: BTreeMap<String, String>,
    }
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
    let index: Index = serde_json::from_str(&text).map_err(|e| LoadError::Inconsistent {
        file: path.to_path_buf(),
        reason: format!("not a valid index: {e}"),
    })?;
    let mut files: Vec<String> = index.weight_map.values().cloned().collect();
    files.sort();
    files.dedup();
    Ok((files, index.weight_map))
}

/// Writes a safetensors file from named f32 tensors stored as `dtype` (tests and tools).
pub fn write_safetensors(
    path: &Path,
    tensors: &[(&str, Vec<usize>, Vec<f32>)],
    dtype: Dtype,
) -> std::io::Result<()> {
    let mut header = serde_json::Map::new();
    let mut data: Vec<u8> = Vec::new();
    for (name, shape, values) in tensors {
        let start = data.len();
        for v in values {
            match dtype {
                Dtype::BF16 => data.extend_from_slice(&bf16::from_f32(*v).to_le_bytes()),
                Dtype::F16 => data.extend_from_slice(&f16::from_f32(*v).to_le_bytes()),
                _ => data.extend_from_slice(&v.to_le_bytes()),
            }
        }
        header.insert(
            name.to_string(),
            serde_json::json!({
                "dtype": match dtype { Dtype::BF16 => "BF16", Dtype::F16 => "F16", _ => "F32" },
                "shape": shape,
                "data_offsets": [start, data.len()],
            }),
        );
    }
    let mut header = serde_json::to_vec(&header)?;
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&data);
    std::fs::write(path, out)
}

/// Bytes an element of a safetensors dtype takes (the dtypes a header may name).
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "F8_E4M3" | "F8_E5M2" | "I8" | "U8" | "BOOL" => 1,
        _ => return None,
    })
}

/// Which tensor of a safetensors file `bytes` the header gets wrong, when the safetensors crate
/// says only that one is (its "invalid shape, data type, or offset for tensor" names none): the
/// first whose offsets do not hold its shape, or end past the data.
fn first_bad_tensor(bytes: &[u8]) -> Option<String> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header: serde_json::Value =
        serde_json::from_slice(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    let data_len = (bytes.len() - 8 - n) as u64;
    let mut tensors: Vec<(&String, &serde_json::Value)> = header
        .as_object()?
        .iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
        .collect();
    tensors.sort_by_key(|(name, _)| name.as_str());
    for (name, info) in tensors {
        let dtype = info["dtype"].as_str().unwrap_or("?");
        let shape: Option<Vec<u64>> = info["shape"]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_u64()).collect());
        let offsets: Option<Vec<u64>> = info["data_offsets"]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_u64()).collect());
        let (Some(shape), Some(offsets)) = (shape, offsets) else {
            return Some(format!(
                "tensor `{name}` has no readable shape or data_offsets"
            ));
        };
        let [begin, end] = offsets[..] else {
            return Some(format!(
                "tensor `{name}` has data_offsets {offsets:?}, not [begin, end]"
            ));
        };
        let Some(size) = dtype_bytes(dtype) else {
            return Some(format!("tensor `{name}` has the unknown dtype {dtype}"));
        };
        let needs = shape.iter().try_fold(size, |acc, &d| acc.checked_mul(d));
        if end < begin || Some(end - begin) != needs {
            return Some(format!(
                "tensor `{name}`: data_offsets [{begin}, {end}) hold {} bytes, its shape {shape:?} of {dtype} needs {}",
                end.saturating_sub(begin),
                needs.map_or("more than 2^64".to_string(), |b| b.to_string())
            ));
        }
        if end > data_len {
            return Some(format!(
                "tensor `{name}` ends at byte {end} of the data, which holds {data_len}"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_config() -> Config {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        Config::from_dir(&dir).expect("config")
    }

    /// Without its MTP head a checkpoint has none of the `mtp.*` tensors, counts none of their
    /// bytes, and keeps every other tensor (made-up and from files alike).
    #[test]
    fn a_checkpoint_without_its_mtp_head_keeps_everything_else() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
        for w in [
            Weights::dummy(&tiny_config(), DUMMY_SEED),
            Weights::open(&dir).expect("the embedded model"),
        ] {
            let names: Vec<String> = w.names().iter().map(|n| n.to_string()).collect();
            let head: Vec<&String> = names.iter().filter(|n| n.starts_with("mtp.")).collect();
            assert!(!head.is_empty() && w.contains(crate::schema::MTP_MARKER));
            let head_bytes: u64 = head.iter().map(|n| w.stored_bytes(n).unwrap()).sum();
            let total = w.total_bytes();
            let without = w.without_mtp_head();
            assert!(!without.contains(crate::schema::MTP_MARKER));
            assert_eq!(without.names().len(), names.len() - head.len());
            assert_eq!(without.total_bytes(), total - head_bytes);
            let norm = "model.norm.weight";
            assert!(without.tensor(norm, without.shape(norm).unwrap()).is_ok());
        }
    }

    /// Dummy weights are the schema's tensors, bf16, the same bits on every load whatever the
    /// order they are fetched in, different for another seed, of the kinds of values asked for.
    #[test]
    fn dummy_weights_are_the_schemas_tensors_and_the_same_on_every_load() {
        let config = tiny_config();
        let a = Weights::dummy(&config, DUMMY_SEED);
        let b = Weights::dummy(&config, DUMMY_SEED);
        let specs = checkpoint_tensors(&config, true);
        assert_eq!(a.names().len(), specs.len());
        assert!(a.contains("mtp.fc.weight") && a.is_dummy());
        let bytes: u64 = specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>() as u64 * 2)
            .sum();
        assert_eq!(a.total_bytes(), bytes);
        let bits = |w: &Weights, name: &str| -> Vec<u16> {
            let shape = w.shape(name).unwrap().to_vec();
            match w.tensor(name, &shape).unwrap().data() {
                TensorData::Bf16(v) => v.iter().map(|x| x.to_bits()).collect(),
                TensorData::F32(_) | TensorData::Fp8(_) => panic!("dummy tensors are bf16"),
            }
        };
        let embed = "model.embed_tokens.weight";
        let norm = "model.layers.0.input_layernorm.weight";
        let (e1, n1) = (bits(&a, embed), bits(&a, norm));
        // Fetched in the other order from the other instance: the same bits.
        let (n2, e2) = (bits(&b, norm), bits(&b, embed));
        assert_eq!((e1.clone(), n1), (e2, n2));
        let other = Weights::dummy(&config, DUMMY_SEED + 1);
        assert_ne!(bits(&other, embed), e1);
        // A projection is centred with variance 1/fan_in; a zero-centred norm is near 0.
        let h = config.hidden_size as f64;
        let values: Vec<f64> = e1.iter().map(|b| bf16::from_bits(*b).to_f64()).collect();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let var = values.iter().map(|v| v * v).sum::<f64>() / values.len() as f64;
        assert!(mean.abs() < 0.01 / h.sqrt(), "mean {mean}");
        assert!((var * h - 1.0).abs() < 0.05, "variance {var} × {h}");
        let norm = a.tensor(norm, &[config.hidden_size]).unwrap().to_f32_vec();
        assert!(norm.iter().all(|v| v.abs() <= 0.05), "{norm:?}");
    }

    /// Dummy weights of an FP8 config: the layers' projections are FP8 (bytes and scales through
    /// `fp8_matrix`, their dequantised values through `tensor`), the embedding and norms bf16;
    /// the bytes counted are those.
    #[test]
    fn dummy_weights_of_an_fp8_config_are_fp8_where_the_checkpoints_are() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/qwen3_fp8_block/model");
        let config = Config::from_dir(&dir).unwrap();
        let w = Weights::dummy(&config, DUMMY_SEED);
        assert!(w.has_fp8());
        assert!(!Weights::dummy(&tiny_config(), DUMMY_SEED).has_fp8());
        let q = "model.layers.0.self_attn.q_proj.weight";
        let shape = w.shape(q).unwrap().to_vec();
        let m = w.fp8_matrix(q, &shape).unwrap().expect("an FP8 projection");
        assert_eq!(
            (m.rows, m.cols, m.block_rows, m.block_cols),
            (shape[0], shape[1], 128, 128)
        );
        assert!(m.q.iter().all(|b| *b != 0x7f && *b != 0xff), "no NaN codes");
        let table = e4m3_table();
        let values = w.tensor(q, &shape).unwrap().to_f32_vec();
        let bc = m.cols / 128;
        for (i, v) in values.iter().enumerate().step_by(97) {
            let (o, c) = (i / m.cols, i % m.cols);
            assert_eq!(
                *v,
                table[m.q[i] as usize] * m.scales[(o / 128) * bc + c / 128]
            );
        }
        let embed = "model.embed_tokens.weight";
        let embed_shape = w.shape(embed).unwrap().to_vec();
        assert!(w.fp8_matrix(embed, &embed_shape).unwrap().is_none());
        assert!(w.tensor(embed, &embed_shape).unwrap().is_bf16());
        // Stored bytes: what the real checkpoint holds (FP8 bytes + f32 scales, bf16 else).
        let real = Weights::open(&dir).unwrap();
        assert_eq!(w.total_bytes(), real.total_bytes());
    }

    /// Without a terminal, loading reports a line per shard as it completes and one at the end.
    #[test]
    fn loading_a_sharded_checkpoint_reports_each_shard_once() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/qwen3_f32_tied_hd32_sharded/model");
        let w = Weights::open(&dir).unwrap().with_progress_as(true, false);
        for name in w.names() {
            let shape = w.shape(name).unwrap().to_vec();
            w.tensor(name, &shape).unwrap();
        }
        w.finish_progress();
        let lines = w.progress_lines();
        assert_eq!(lines.len(), 8, "{lines:#?}");
        for (k, line) in lines[..7].iter().enumerate() {
            assert!(
                line.starts_with(&format!("loaded shard {}/7 model-0000", k + 1)),
                "{line}"
            );
        }
        assert!(
            lines[7].starts_with("loaded 0.5 MiB of weights in"),
            "{}",
            lines[7]
        );
    }

    #[test]
    fn a_dummy_tensor_of_the_wrong_shape_is_refused_naming_it() {
        let w = Weights::dummy(&tiny_config(), DUMMY_SEED);
        let err = w.tensor("model.norm.weight", &[7]).unwrap_err().to_string();
        assert!(
            err.contains("model.norm.weight") && err.contains("dummy"),
            "{err}"
        );
        let err = w.tensor("nope", &[1]).unwrap_err().to_string();
        assert!(err.contains("`nope`"), "{err}");
    }

    /// A raw tensor: name, dtype, shape, little-endian bytes.
    type Raw<'a> = (&'a str, &'a str, Vec<usize>, Vec<u8>);

    /// A safetensors file of raw tensors.
    fn write_raw(path: &Path, tensors: &[Raw<'_>]) {
        let mut header = serde_json::Map::new();
        let mut data = Vec::new();
        for (name, dtype, shape, bytes) in tensors {
            let start = data.len();
            data.extend_from_slice(bytes);
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
            );
        }
        let mut header = serde_json::to_vec(&header).unwrap();
        while !header.len().is_multiple_of(8) {
            header.push(b' ');
        }
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&header);
        out.extend_from_slice(&data);
        std::fs::write(path, out).unwrap();
    }

    /// A checkpoint directory with an FP8 config (blocks of 2 × 2) and `tensors`.
    fn fp8_dir(tag: &str, block: &str, tensors: &[Raw<'_>]) -> tempfile::TempDir {
        let tmp = tempdir(tag);
        let dir = tmp.path();
        let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/qwen3_f32_untied/model/config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(base).unwrap()).unwrap();
        config["quantization_config"] = serde_json::from_str(&format!(
            r#"{{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": {block}}}"#
        ))
        .unwrap();
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        write_raw(&dir.join(SINGLE_FILE), tensors);
        tmp
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn e4m3_bytes_decode_as_the_ocp_format_says() {
        let t = e4m3_table();
        assert_eq!(t[0x38], 1.0);
        assert_eq!(t[0xb8], -1.0);
        assert_eq!(t[0x7e], 448.0, "the largest finite value");
        assert_eq!(t[0x01], 2f32.powi(-9), "the smallest subnormal");
        assert_eq!(t[0x08], 2f32.powi(-6), "the smallest normal");
        assert_eq!(t[0x3c], 1.5);
        assert!(t[0x7f].is_nan() && t[0xff].is_nan());
        assert_eq!(t[0x00], 0.0);
    }

    /// A [4, 4] FP8 weight in 2 × 2 blocks: each value times its block's scale, in f32.
    #[test]
    fn fp8_weights_are_dequantised_block_by_block() {
        let q: Vec<u8> = (0..16)
            .map(|i| if i % 2 == 0 { 0x38 } else { 0x3c })
            .collect();
        let scales = [0.5f32, 2.0, -1.0, 0.25];
        let dir = fp8_dir(
            "fp8-ok",
            "[2, 2]",
            &[
                ("w.weight", "F8_E4M3", vec![4, 4], q),
                ("w.weight_scale_inv", "F32", vec![2, 2], f32_bytes(&scales)),
            ],
        );
        let w = Weights::open(dir.path()).unwrap();
        assert!(w.has_fp8(), "an F8_E4M3 tensor makes the checkpoint FP8");
        let t = w.tensor("w.weight", &[4, 4]).unwrap();
        let got = t.to_f32_vec();
        for o in 0..4 {
            for i in 0..4 {
                let q = if (o * 4 + i) % 2 == 0 { 1.0 } else { 1.5 };
                assert_eq!(
                    got[o * 4 + i],
                    q * scales[(o / 2) * 2 + i / 2],
                    "[{o}, {i}]"
                );
            }
        }
        // Kept as stored: the same values element by element, row by row and in a slice of
        // rows; 16 bytes and 4 f32 scales.
        let kept = w.tensor_kept("w.weight", &[4, 4]).unwrap();
        assert_eq!(kept.bytes(), 16 + 4 * 4);
        assert_eq!(w.fetched_bytes(), 16 + 4 * 4);
        assert_eq!(kept.to_f32_vec(), got);
        let TensorData::Fp8(m) = kept.data() else {
            panic!("tensor_kept keeps FP8")
        };
        let mut row = [0f32; 4];
        for r in 0..4 {
            m.row_into(r, &mut row);
            assert_eq!(row, got[r * 4..(r + 1) * 4], "row {r}");
        }
        let lower = kept.data().rows(4, 2..4);
        assert_eq!(
            (0..8).map(|i| lower.get(i)).collect::<Vec<_>>(),
            got[8..],
            "rows 2..4 find their blocks' scales"
        );
        // Two kept parts concatenated: rows (and their blocks' scales) one after the other.
        let other = w.tensor_kept("w.weight", &[4, 4]).unwrap();
        let both = Tensor::concat_rows("both", &[&kept, &other])
            .unwrap()
            .unwrap();
        assert_eq!(both.shape(), [8, 4]);
        assert_eq!(both.to_f32_vec(), [got.clone(), got].concat());
        let bf = Tensor::from_bf16("b", vec![2, 4], vec![bf16::ONE; 8]);
        assert!(Tensor::concat_rows("mixed", &[&kept, &bf])
            .unwrap()
            .is_none());
    }

    #[test]
    fn e4m3_bytes_widen_by_their_bits_as_the_table_says() {
        let table = e4m3_table();
        for b in 0..=255u8 {
            let (v, t) = (e4m3_value(b), table[b as usize]);
            assert!(
                v.to_bits() == t.to_bits() || (v.is_nan() && t.is_nan()),
                "byte {b:#04x}: {v} vs {t}"
            );
        }
    }

    #[test]
    fn an_fp8_weight_holding_a_nan_is_refused_naming_the_tensor_and_element() {
        let mut q = vec![0x38u8; 16];
        q[6] = 0xff;
        let dir = fp8_dir(
            "fp8-nan",
            "[2, 2]",
            &[
                ("w.weight", "F8_E4M3", vec![4, 4], q),
                (
                    "w.weight_scale_inv",
                    "F32",
                    vec![2, 2],
                    f32_bytes(&[1.0; 4]),
                ),
            ],
        );
        let w = Weights::open(dir.path()).unwrap();
        for e in [
            w.tensor("w.weight", &[4, 4]).unwrap_err(),
            w.tensor_kept("w.weight", &[4, 4]).unwrap_err(),
        ] {
            let msg = e.to_string();
            assert!(
                msg.contains("`w.weight`") && msg.contains("NaN") && msg.contains("[1, 2]"),
                "{msg}"
            );
        }
    }

    #[test]
    fn a_bad_fp8_weight_is_refused_naming_the_tensor() {
        let q = vec![0x38u8; 16];
        let scale = |shape: Vec<usize>, n: usize| {
            ("w.weight_scale_inv", "F32", shape, f32_bytes(&vec![1.0; n]))
        };
        let cases: Vec<(&str, &str, Vec<Raw<'_>>, &str)> = vec![
            (
                "missing",
                "[2, 2]",
                vec![("w.weight", "F8_E4M3", vec![4, 4], q.clone())],
                "`w.weight_scale_inv` is missing",
            ),
            (
                "shape",
                "[2, 2]",
                vec![
                    ("w.weight", "F8_E4M3", vec![4, 4], q.clone()),
                    scale(vec![1, 4], 4),
                ],
                "expected [2, 2]",
            ),
            (
                "block",
                "[3, 2]",
                vec![
                    ("w.weight", "F8_E4M3", vec![4, 4], q.clone()),
                    scale(vec![2, 2], 4),
                ],
                "not a whole number of 3×2 blocks",
            ),
            (
                "nan",
                "[2, 2]",
                vec![
                    ("w.weight", "F8_E4M3", vec![4, 4], q.clone()),
                    (
                        "w.weight_scale_inv",
                        "F32",
                        vec![2, 2],
                        f32_bytes(&[1.0, f32::NAN, 1.0, 1.0]),
                    ),
                ],
                "not a finite number",
            ),
        ];
        for (tag, block, tensors, want) in cases {
            let dir = fp8_dir(&format!("fp8-{tag}"), block, &tensors);
            let err = Weights::open(dir.path())
                .unwrap()
                .tensor("w.weight", &[4, 4])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("w.weight") && err.contains(want),
                "{tag}: {err}"
            );
        }
        // Without a quantization_config, FP8 values cannot be scaled.
        let tmp = tempdir("fp8-noconfig");
        let dir = tmp.path();
        write_raw(
            &dir.join(SINGLE_FILE),
            &[("w.weight", "F8_E4M3", vec![4, 4], q)],
        );
        let err = Weights::open(dir)
            .unwrap()
            .tensor("w.weight", &[4, 4])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("quantization_config") && err.contains("w.weight"),
            "{err}"
        );
    }

    /// A fresh scratch directory, removed when dropped.
    fn tempdir(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("flashlane-weights-{tag}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn bf16_stays_bf16_and_f16_widens_to_f32() {
        let tmp = tempdir("dtypes");
        let dir = tmp.path();
        let vals = vec![1.0f32, -2.5, 0.375, 3.0];
        write_safetensors(
            &dir.join("a.safetensors"),
            &[("w", vec![2, 2], vals.clone())],
            Dtype::BF16,
        )
        .unwrap();
        write_safetensors(
            &dir.join("b.safetensors"),
            &[("h", vec![4], vals.clone())],
            Dtype::F16,
        )
        .unwrap();
        let w = Weights::open(dir).unwrap();
        let t = w.tensor("w", &[2, 2]).unwrap();
        assert!(t.is_bf16());
        assert_eq!(t.to_f32_vec(), vals);
        let h = w.tensor("h", &[4]).unwrap();
        assert!(!h.is_bf16());
        assert_eq!(h.to_f32_vec(), vals);
    }

    #[test]
    fn shape_mismatch_and_missing_tensor_name_file_and_tensor() {
        let tmp = tempdir("errors");
        let dir = tmp.path();
        write_safetensors(
            &dir.join(SINGLE_FILE),
            &[("w", vec![2, 2], vec![0.5; 4])],
            Dtype::F32,
        )
        .unwrap();
        let w = Weights::open(dir).unwrap();
        let err = w.tensor("w", &[4, 1]).unwrap_err().to_string();
        assert!(err.contains("`w`") && err.contains(SINGLE_FILE), "{err}");
        let err = w.tensor("nope", &[1]).unwrap_err().to_string();
        assert!(err.contains("`nope`") && err.contains(SINGLE_FILE), "{err}");
    }

    #[test]
    fn truncated_file_fails_at_open_naming_the_file() {
        let tmp = tempdir("truncated");
        let dir = tmp.path();
        let path = dir.join(SINGLE_FILE);
        write_safetensors(&path, &[("w", vec![64], vec![0.5; 64])], Dtype::F32).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let err = Weights::open(dir).err().unwrap().to_string();
        assert!(err.contains(SINGLE_FILE), "{err}");
    }

    #[test]
    fn sharded_checkpoint_loads_through_its_index_and_checks_it() {
        let tmp = tempdir("sharded");
        let dir = tmp.path();
        write_safetensors(
            &dir.join("s1.safetensors"),
            &[("a", vec![2], vec![1.0, 2.0])],
            Dtype::F32,
        )
        .unwrap();
        write_safetensors(
            &dir.join("s2.safetensors"),
            &[("b", vec![1], vec![3.0])],
            Dtype::F32,
        )
        .unwrap();
        let index = r#"{"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}"#;
        std::fs::write(dir.join(INDEX_FILE), index).unwrap();
        let w = Weights::open(dir).unwrap();
        assert_eq!(w.tensor("b", &[1]).unwrap().to_f32_vec(), vec![3.0]);
        let bad =
            r#"{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"}}"#;
        std::fs::write(dir.join(INDEX_FILE), bad).unwrap();
        let err = Weights::open(dir).err().unwrap().to_string();
        assert!(
            err.contains("`c`") && err.contains("s2.safetensors"),
            "{err}"
        );
    }
}
