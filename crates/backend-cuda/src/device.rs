//! The GPU as this crate uses it: one context, one stream (every launch and copy is ordered on
//! it, so a round needs no host sync until its logits come back), device buffers addressed by
//! raw pointers, and a launch helper.

use crate::{CudaError, DeviceMemory};
use cudarc::driver::{
    result, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    PinnedHostSlice, ValidAsZeroBits,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

impl From<result::DriverError> for CudaError {
    fn from(e: result::DriverError) -> CudaError {
        CudaError::Driver(e.to_string())
    }
}

/// Device 0 and the stream everything runs on.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Whether kernels launch with programmatic dependent launch: by round, always or never
    /// ([`PDL_ENV`]).
    pdl: PdlSetting,
    /// The current round's choice ([`Gpu::set_round_launches`]), read under
    /// [`PdlSetting::ByRound`]. One stream, one engine thread: relaxed order is enough.
    round_overlapped: AtomicBool,
    /// Whether launches are recorded into `launches` (the kernel timeline only:
    /// `timeline.rs`), checked before the lock so that a launch otherwise takes none.
    recording: AtomicBool,
    launches: Mutex<Vec<LaunchRecord>>,
}

/// One launch as the kernel timeline names it (`timeline.rs`): its function's handle and its
/// blocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaunchRecord {
    pub(crate) function: usize,
    pub(crate) blocks: u64,
}

/// How the kernels of a round follow one another on the stream (chosen a round by
/// `kernels::round_launches`: the bits are the same either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launches {
    /// Programmatic dependent launch: each kernel may start while the one ahead runs, and waits
    /// inside for it (`pdl_wait` in `common.cu`) after pulling its weights into L2.
    Overlapped,
    /// Each kernel starts once the one ahead of it has finished.
    Serial,
}

/// What [`PDL_ENV`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PdlSetting {
    /// Each round as `kernels::round_launches` chooses (unset, or any other value).
    ByRound,
    /// `1`: every round overlapped (the rule before session 29).
    Always,
    /// `0`: every round serial.
    Never,
}

/// `FLASHLANE_PDL=0` launches every kernel only once the one ahead of it has finished, `=1`
/// launches every round's kernels overlapped ([`Launches::Overlapped`]); unset, each round is
/// launched as `kernels::round_launches` chooses. For A/B runs of one binary: the bits do not
/// change.
pub const PDL_ENV: &str = "FLASHLANE_PDL";

/// Most arguments a kernel of this crate takes (the DeltaNet recurrence takes 15, `moe_down_fp8`
/// 12), with room to spare: only the size of two arrays on the launching thread's stack.
const KERNEL_ARGS_MAX: usize = 24;

impl Gpu {
    /// The device's multiprocessors (132 on an H200).
    pub fn multiprocessors(&self) -> Result<usize, CudaError> {
        let n = self.ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Opens device 0, or says why not (no driver, no device).
    pub fn open() -> Result<Arc<Gpu>, CudaError> {
        // cudarc loads the driver library on first use and panics when it is missing: ask first.
        // SAFETY: only tries to load the library (libloading), calls nothing in it.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::Unavailable(
                "no CUDA driver library (libcuda.so) on this machine".into(),
            ));
        }
        let count = CudaContext::device_count()
            .map_err(|e| CudaError::Unavailable(format!("no usable CUDA driver: {e}")))?;
        if count < 1 {
            return Err(CudaError::Unavailable("no CUDA device".into()));
        }
        let ctx = CudaContext::new(0)
            .map_err(|e| CudaError::Unavailable(format!("cannot open CUDA device 0: {e}")))?;
        // SAFETY: this crate uses one stream only, and every operation on a buffer (kernels,
        // copies, and cudarc's stream-ordered free when a `CudaSlice` drops) is enqueued on it,
        // so work on a buffer always completes before its memory is freed; the per-buffer
        // events cudarc would record to order several streams are unnecessary.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own: the legacy default stream cannot be captured into a graph.
        let stream = ctx.new_stream()?;
        let pdl = match std::env::var(PDL_ENV).as_deref() {
            Ok("0") => PdlSetting::Never,
            Ok("1") => PdlSetting::Always,
            _ => PdlSetting::ByRound,
        };
        Ok(Arc::new(Gpu {
            ctx,
            stream,
            pdl,
            round_overlapped: AtomicBool::new(true),
            recording: AtomicBool::new(false),
            launches: Mutex::new(Vec::new()),
        }))
    }

    /// How the launches from here on follow one another (under [`PDL_ENV`]'s default; `0` and
    /// `1` override it). Set before a round is launched or captured: a captured graph keeps the
    /// launches' attributes, and its key (the round's rows) decides the choice, so a graph
    /// replays what it was captured with.
    pub fn set_round_launches(&self, launches: Launches) {
        self.round_overlapped
            .store(launches == Launches::Overlapped, Ordering::Relaxed);
    }

    /// Whether the next launch overlaps the one ahead of it.
    fn overlapped(&self) -> bool {
        match self.pdl {
            PdlSetting::Always => true,
            PdlSetting::Never => false,
            PdlSetting::ByRound => self.round_overlapped.load(Ordering::Relaxed),
        }
    }

    /// Records the launches from here on (`on`) or stops (the kernel timeline).
    pub(crate) fn record_launches(&self, on: bool) {
        self.recording.store(on, Ordering::Relaxed);
    }

    /// The launches recorded so far, taken.
    pub(crate) fn take_launches(&self) -> Vec<LaunchRecord> {
        std::mem::take(&mut *self.launch_log())
    }

    /// How many launches are recorded so far.
    pub(crate) fn recorded_launches(&self) -> usize {
        self.launch_log().len()
    }

    /// The launches recorded after the first `from`.
    pub(crate) fn launches_since(&self, from: usize) -> Vec<LaunchRecord> {
        self.launch_log()
            .get(from..)
            .map_or(Vec::new(), <[_]>::to_vec)
    }

    /// Records `launches` as launched now, where recording (a graph's replay: the launches it
    /// was captured with).
    pub(crate) fn record_replay(&self, launches: &[LaunchRecord]) {
        if self.recording.load(Ordering::Relaxed) {
            self.launch_log().extend_from_slice(launches);
        }
    }

    fn launch_log(&self) -> std::sync::MutexGuard<'_, Vec<LaunchRecord>> {
        // A poisoned log only lost a diagnostic's record: go on with what it holds.
        self.launches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device's name and its (free, total) memory in bytes.
    pub fn memory(&self) -> Result<DeviceMemory, CudaError> {
        let (free, total) = self.ctx.mem_get_info()?;
        Ok(DeviceMemory {
            name: self.ctx.name()?,
            free_bytes: free as u64,
            total_bytes: total as u64,
        })
    }

    /// Launches `f` on the stream with `args` in order.
    pub fn launch(
        &self,
        f: &CudaFunction,
        grid: (u32, u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        self.launch_with_shared(f, grid, block, 0, args)
    }

    /// [`Gpu::launch`] with `shared_bytes` of dynamic shared memory a block (over 48 KiB only for
    /// a function whose limit was raised when it was loaded). Where the round's launches are
    /// [`Launches::Overlapped`] (see [`PDL_ENV`]) it is a programmatic dependent launch: the
    /// kernel may start before the one ahead of it on the stream has finished (every kernel of
    /// this crate waits for it before it touches anything but its weights; see `common.cu`).
    pub fn launch_with_shared(
        &self,
        f: &CudaFunction,
        grid: (u32, u32, u32),
        block: u32,
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        use cudarc::driver::sys;
        assert!(
            args.len() <= KERNEL_ARGS_MAX,
            "launch: {} arguments, at most {KERNEL_ARGS_MAX}",
            args.len()
        );
        // Each argument in an 8-byte slot: the driver reads as many bytes as the kernel's
        // parameter takes from the slot's start (little-endian: the i32 and f32 values' bits).
        let mut slots = [0u64; KERNEL_ARGS_MAX];
        for (slot, a) in slots.iter_mut().zip(args) {
            *slot = match *a {
                Arg::Ptr(p) | Arg::U64(p) => p,
                Arg::I32(v) => u64::from(v as u32),
                Arg::F32(v) => u64::from(v.to_bits()),
                Arg::Map(_) => 0,
            };
        }
        let mut params = [std::ptr::null_mut::<std::ffi::c_void>(); KERNEL_ARGS_MAX];
        for ((param, slot), a) in params.iter_mut().zip(slots.iter_mut()).zip(args) {
            *param = match a {
                // The driver reads the map's 128 bytes from `args`, which outlives the call.
                Arg::Map(map) => map.0.as_ptr().cast_mut().cast(),
                _ => (slot as *mut u64).cast(),
            };
        }
        // SAFETY: an all-zero launch attribute is a valid value of the C struct (an id and a
        // union of plain data); its fields are set below.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shared_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: u32::from(self.overlapped()),
        };
        self.ctx.bind_to_thread()?;
        // SAFETY: every kernel of this crate takes exactly the arguments its launcher passes, in
        // order and of the C types named in `Arg`; pointers address live buffers sized by the
        // launchers for the rows they cover. `params` points at `slots` (and at a tensor map's
        // 128 bytes in `args`), and all of them (and `attr`) outlive the call, which copies the
        // arguments before it returns.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                f.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()?;
        if self.recording.load(Ordering::Relaxed) {
            self.launch_log().push(LaunchRecord {
                function: f.cu_function() as usize,
                blocks: u64::from(grid.0) * u64::from(grid.1) * u64::from(grid.2),
            });
        }
        Ok(())
    }

    /// Copies `floats` f32s from device address `src` to `dst` (ordered on the stream).
    pub fn copy_f32(&self, dst: u64, src: u64, floats: usize) -> Result<(), CudaError> {
        self.copy_bytes(dst, src, floats * std::mem::size_of::<f32>())
    }

    /// Copies `bytes` bytes from device address `src` to `dst` (ordered on the stream).
    pub fn copy_bytes(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: callers pass addresses from `Buf::at` of live buffers (which checks the start)
        // and size `bytes` from the same layout arithmetic that sized those buffers (session
        // strides × session index, see `state.rs`), so both ranges lie inside them.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }?;
        Ok(())
    }

    pub fn sync(&self) -> Result<(), CudaError> {
        self.stream.synchronize()?;
        Ok(())
    }
}

/// One kernel argument, as the C side declares it.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A device pointer (0 for null).
    Ptr(u64),
    I32(i32),
    U64(u64),
    F32(f32),
    /// A `CUtensorMap` by value (a `__grid_constant__` parameter of 128 bytes).
    Map(TensorMap),
}

/// A `CUtensorMap`: 128 opaque bytes `cuTensorMapEncodeTiled` writes, aligned as the driver
/// asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TensorMap(pub [u64; 16]);

/// A device buffer and its raw address.
pub struct Buf<T> {
    slice: CudaSlice<T>,
    ptr: u64,
}

impl<T: DeviceRepr + ValidAsZeroBits> Buf<T> {
    pub fn zeros(gpu: &Gpu, len: usize) -> Result<Buf<T>, CudaError> {
        // A zero-length allocation has no address; keep one element so `ptr` is always valid.
        let slice = gpu.stream.alloc_zeros::<T>(len.max(1))?;
        Ok(Buf::wrap(gpu, slice))
    }

    pub fn from_host(gpu: &Gpu, data: &[T]) -> Result<Buf<T>, CudaError> {
        if data.is_empty() {
            return Buf::zeros(gpu, 1);
        }
        let slice = gpu.stream.clone_htod(data)?;
        Ok(Buf::wrap(gpu, slice))
    }

    fn wrap(gpu: &Gpu, slice: CudaSlice<T>) -> Buf<T> {
        let ptr = {
            let (p, _sync) = slice.device_ptr(&gpu.stream);
            p
        };
        Buf { slice, ptr }
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Never: a buffer holds one element at least.
    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }

    /// The address of element `offset`.
    pub fn at(&self, offset: usize) -> u64 {
        assert!(
            offset <= self.slice.len(),
            "offset {offset} past a buffer of {}",
            self.slice.len()
        );
        self.ptr + (offset * std::mem::size_of::<T>()) as u64
    }

    /// Copies `data` to the start of the buffer (ordered on the stream).
    pub fn write(&mut self, gpu: &Gpu, data: &[T]) -> Result<(), CudaError> {
        self.write_at(gpu, 0, data)
    }

    /// Copies `data` to elements `offset..offset + data.len()` (ordered on the stream).
    pub fn write_at(&mut self, gpu: &Gpu, offset: usize, data: &[T]) -> Result<(), CudaError> {
        let end = offset + data.len();
        assert!(
            end <= self.slice.len(),
            "write of {}..{end} past a buffer of {}",
            offset,
            self.slice.len()
        );
        if !data.is_empty() {
            let mut view = self.slice.slice_mut(offset..end);
            gpu.stream.memcpy_htod(data, &mut view)?;
        }
        Ok(())
    }

    /// The first `len` elements, copied back (waits for the stream).
    pub fn read(&self, gpu: &Gpu, len: usize) -> Result<Vec<T>, CudaError> {
        let view = self.slice.slice(0..len);
        let out = gpu.stream.clone_dtoh(&view)?;
        gpu.sync()?;
        Ok(out)
    }

    /// Makes room for `len` elements (contents are not kept): scratch that grows with the batch.
    /// Returns whether the buffer moved.
    pub fn ensure(&mut self, gpu: &Gpu, len: usize) -> Result<bool, CudaError> {
        if self.slice.len() >= len {
            return Ok(false);
        }
        *self = Buf::zeros(gpu, len.next_power_of_two())?;
        Ok(true)
    }
}

/// Page-locked host memory a round's logits come back into: the GPU copies straight into it
/// (no staging through pageable memory, and no fresh pages to fault in: a 64-row round of
/// 151,936-token rows is 39 MB, which a new `Vec` each round took from the kernel page by page),
/// and the engine reads the rows from it. Grown with the round, never shrunk; cacheable, not
/// write-combined, since the host reads it.
#[derive(Default)]
pub struct HostLogits {
    slice: Option<PinnedHostSlice<f32>>,
}

impl HostLogits {
    /// Copies each `(offset, len)` range of `src` back, one range after another, and returns
    /// them (waits for the stream).
    pub fn read_ranges(
        &mut self,
        gpu: &Gpu,
        src: &Buf<f32>,
        ranges: &[(usize, usize)],
    ) -> Result<&[f32], CudaError> {
        let total: usize = ranges.iter().map(|r| r.1).sum();
        if self.slice.as_ref().is_none_or(|s| s.len() < total) {
            // The old buffer goes first: both at once could exceed what may be pinned.
            self.slice = None;
            // SAFETY: the memory is uninitialised; only what the copies below write is read.
            // Flags 0: cacheable page-locked memory.
            self.slice = Some(unsafe {
                gpu.ctx
                    .alloc_pinned_with_flags::<f32>(total.max(1).next_power_of_two(), 0)?
            });
        }
        let host = self
            .slice
            .as_mut()
            .expect("F6: the buffer was just made")
            .as_mut_slice()?;
        let mut at = 0;
        for &(offset, len) in ranges {
            let view = src.slice.slice(offset..offset + len);
            gpu.stream.memcpy_dtoh(&view, &mut host[at..at + len])?;
            at += len;
        }
        gpu.sync()?;
        Ok(&host[..total])
    }
}
