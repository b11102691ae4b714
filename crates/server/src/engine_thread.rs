//! The engine thread: the single owner of the engine and every stream.
//!
//! HTTP handlers send it [`Command`]s over one bounded channel and receive each stream's events
//! over a bounded channel of their own, one message per round. The thread runs rounds while there
//! is work and blocks on its channel when idle. A stream whose receiver is gone (the client
//! disconnected) or cannot keep up is cancelled before the next round, so its session frees
//! within one round.

use crate::advice::{Advice, Recorder, Served, SuggestEvery};
use lane::{Counters, Engine, Event, FinishReason, Refusal, Request, SlotView, StreamId, Target};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Commands waiting for the engine thread. Bounded so that a flood of requests is pushed back to
/// the HTTP layer (which answers 503) instead of growing memory; the engine drains the whole
/// channel before every round, so 1024 is far more than one round ever sees.
pub const COMMAND_QUEUE_MAX: usize = 1024;

/// Rounds of events a stream's receiver may fall behind before the stream is cancelled as a
/// client that does not read. Each round is one message, so this is thousands of tokens.
pub const STREAM_BACKLOG_MAX: usize = 4096;

/// How long the thread keeps running streams after shutdown was asked before failing them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// One token of a reply as the HTTP layer needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenOut {
    pub token: u32,
    /// When the request asked for log-probabilities.
    pub logprob: Option<f32>,
    pub top_logprobs: Vec<(u32, f32)>,
}

/// What a stream's receiver gets: every round's tokens, then its end.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// The stream took a session; `cached_tokens` of its prompt came from the prompt cache.
    /// Before its first tokens.
    Admitted {
        cached_tokens: u64,
    },
    Tokens(Vec<TokenOut>),
    Finished {
        reason: FinishReason,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
}

/// Everything `/slots` and `/metrics` show, taken between two rounds.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub slots: Vec<SlotView>,
    pub counters: Counters,
    pub queue_depth: usize,
    pub live_streams: usize,
    pub paused_streams: usize,
    /// Tokens generated per second over the last few seconds.
    pub tokens_per_second: f64,
    /// The prompt cache's blocks and bytes (`None`: no cache).
    pub prompt_cache: Option<(usize, u64)>,
    /// `--suggest-every`'s latest advice (None: off, or no search finished yet).
    pub advice: Option<Advice>,
}

pub enum Command {
    Submit {
        /// (Boxed: a request is large beside the other commands that share the channel.)
        request: Box<Request>,
        events: mpsc::Sender<StreamEvent>,
        reply: oneshot::Sender<Result<StreamId, Refusal>>,
    },
    /// The host is done with a stream (client gone, or a stop string matched).
    Cancel(StreamId),
    Snapshot(oneshot::Sender<Snapshot>),
    /// Stop admitting; finish or fail the running streams within [`SHUTDOWN_GRACE`]; exit.
    Shutdown,
}

/// The HTTP side's handle on the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    /// Set by [`EngineHandle::shutdown`]: `/health` answers 503 from then on, so a load balancer
    /// that probes it sends no new work to a replica that is draining.
    draining: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Largest session capacity and the window, fixed at start-up, for defaults of `max_tokens`.
    pub largest_capacity: u64,
    pub window: u64,
}

/// Why the engine could not take a command.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the engine is busy: its command queue is full")]
    Busy,
    #[error("the engine has stopped")]
    Stopped,
}

impl EngineHandle {
    pub async fn submit(
        &self,
        request: Request,
    ) -> Result<(Result<StreamId, Refusal>, mpsc::Receiver<StreamEvent>), SendError> {
        let (events, receiver) = mpsc::channel(STREAM_BACKLOG_MAX);
        let (reply, answer) = oneshot::channel();
        self.send(Command::Submit {
            request: Box::new(request),
            events,
            reply,
        })?;
        let outcome = answer.await.map_err(|_| SendError::Stopped)?;
        Ok((outcome, receiver))
    }

    pub fn cancel(&self, stream: StreamId) {
        // Best effort: if the queue is full or the engine stopped, the closed receiver is noticed
        // before the next round anyway.
        let _ = self.commands.try_send(Command::Cancel(stream));
    }

    pub async fn snapshot(&self) -> Result<Snapshot, SendError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Snapshot(reply))?;
        answer.await.map_err(|_| SendError::Stopped)
    }

    pub fn shutdown(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.commands.try_send(Command::Shutdown);
    }

    /// Whether a shutdown has begun (running streams finish; nothing new is admitted).
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once the engine thread has returned (after a shutdown, its streams done).
    pub async fn stopped(&self) {
        self.commands.closed().await;
    }

    fn send(&self, command: Command) -> Result<(), SendError> {
        self.commands.try_send(command).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Busy,
            mpsc::error::TrySendError::Closed(_) => SendError::Stopped,
        })
    }
}

/// Why the engine thread did not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// Building the engine (loading the model, allocating sessions) failed, for this reason.
    #[error(transparent)]
    Make(Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot start the engine thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error("the engine thread died while starting")]
    Died,
}

/// Starts the engine thread. `make` builds the engine on that thread (so a device context never
/// crosses threads); its error is returned here.
pub fn spawn<T, F, E>(make: F) -> Result<(EngineHandle, std::thread::JoinHandle<()>), SpawnError>
where
    T: Target + 'static,
    F: FnOnce() -> Result<Engine<T>, E> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    spawn_with(make, None)
}

/// [`spawn`], with `--suggest-every`'s advisor when given (see [`crate::advice`]).
pub fn spawn_with<T, F, E>(
    make: F,
    suggest: Option<SuggestEvery>,
) -> Result<(EngineHandle, std::thread::JoinHandle<()>), SpawnError>
where
    T: Target + 'static,
    F: FnOnce() -> Result<Engine<T>, E> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let recorder = suggest.map(Recorder::start).transpose()?;
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE_MAX);
    let (ready, started) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || match make() {
            Err(e) => {
                let _ = ready.send(Err(SpawnError::Make(e.into())));
            }
            Ok(engine) => {
                let largest = engine.slots().iter().map(|s| s.capacity).max().unwrap_or(0);
                let window = 1 + engine.config().draft_tokens;
                let _ = ready.send(Ok((largest, window)));
                let mut engine_loop = EngineLoop::new(engine);
                engine_loop.recorder = recorder;
                engine_loop.run(receiver);
            }
        })?;
    let (largest_capacity, window) = started.recv().map_err(|_| SpawnError::Died)??;
    Ok((
        EngineHandle {
            commands,
            draining: Default::default(),
            largest_capacity,
            window,
        },
        thread,
    ))
}

struct EngineLoop<T: Target> {
    engine: Engine<T>,
    senders: HashMap<StreamId, mpsc::Sender<StreamEvent>>,
    shutdown_since: Option<Instant>,
    rate: TokenRate,
    /// `--suggest-every`: finished requests recorded for the advisor (None: off).
    recorder: Option<Recorder>,
    /// Each stream's arrival and `max_tokens`, for the recorder.
    arrivals: HashMap<StreamId, (f64, u64)>,
    started: Instant,
}

impl<T: Target> EngineLoop<T> {
    fn new(engine: Engine<T>) -> Self {
        EngineLoop {
            engine,
            senders: HashMap::new(),
            shutdown_since: None,
            rate: TokenRate::default(),
            recorder: None,
            arrivals: HashMap::new(),
            started: Instant::now(),
        }
    }

    fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            if self.engine.is_idle() {
                if self.shutdown_since.is_some() {
                    return;
                }
                match commands.blocking_recv() {
                    Some(command) => self.apply(command),
                    None => return,
                }
            }
            while let Ok(command) = commands.try_recv() {
                self.apply(command);
            }
            self.cancel_abandoned();
            if self
                .shutdown_since
                .is_some_and(|since| since.elapsed() > SHUTDOWN_GRACE)
            {
                let events = self.engine.fail_all("the server is shutting down");
                self.dispatch(events);
                return;
            }
            let events = self.engine.step();
            self.dispatch(events);
            self.rate.record(self.engine.counters().tokens_generated);
        }
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Submit {
                request,
                events,
                reply,
            } => {
                let max_tokens = request.max_new_tokens;
                let outcome = if self.shutdown_since.is_some() {
                    Err(Refusal::ShuttingDown)
                } else {
                    self.engine.submit(*request)
                };
                if let Ok(stream) = outcome {
                    self.senders.insert(stream, events);
                    if self.recorder.is_some() {
                        let at = self.started.elapsed().as_secs_f64();
                        self.arrivals.insert(stream, (at, max_tokens));
                    }
                }
                if reply.send(outcome.clone()).is_err() {
                    // The handler is gone already: drop the stream before it takes a session.
                    if let Ok(stream) = outcome {
                        self.drop_stream(stream);
                    }
                }
            }
            Command::Cancel(stream) => {
                self.drop_stream(stream);
            }
            Command::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Command::Shutdown => {
                self.shutdown_since.get_or_insert_with(Instant::now);
            }
        }
    }

    /// Ends `stream` without a reply (its client is gone or cannot keep up): its session frees
    /// and nothing more is kept of it.
    fn drop_stream(&mut self, stream: StreamId) {
        self.engine.discard(stream);
        self.senders.remove(&stream);
        self.arrivals.remove(&stream);
    }

    /// Cancels every stream whose client stopped listening.
    fn cancel_abandoned(&mut self) {
        let gone: Vec<StreamId> = self
            .senders
            .iter()
            .filter(|(_, sender)| sender.is_closed())
            .map(|(stream, _)| *stream)
            .collect();
        for stream in gone {
            self.drop_stream(stream);
        }
    }

    /// Sends each stream its round's tokens in one message, then its end.
    fn dispatch(&mut self, events: Vec<Event>) {
        let mut tokens: HashMap<StreamId, Vec<TokenOut>> = HashMap::new();
        let mut order: Vec<StreamId> = Vec::new();
        let mut finished: Vec<(StreamId, StreamEvent)> = Vec::new();
        for event in events {
            match event {
                // Sent at once: a stream's admission goes before its tokens, sent below.
                Event::Admitted {
                    stream,
                    cached_tokens,
                } => {
                    let delivered = self.senders.get(&stream).is_some_and(|sender| {
                        sender
                            .try_send(StreamEvent::Admitted { cached_tokens })
                            .is_ok()
                    });
                    if !delivered {
                        self.drop_stream(stream);
                    }
                }
                Event::Token {
                    stream,
                    token,
                    logprob,
                    top_logprobs,
                } => {
                    let list = tokens.entry(stream).or_default();
                    if list.is_empty() {
                        order.push(stream);
                    }
                    list.push(TokenOut {
                        token,
                        logprob,
                        top_logprobs,
                    });
                }
                Event::Finished {
                    stream,
                    reason,
                    prompt_tokens,
                    completion_tokens,
                } => {
                    if let (Some(recorder), Some((arrival_s, max_tokens))) =
                        (self.recorder.as_mut(), self.arrivals.remove(&stream))
                    {
                        recorder.finished(Served {
                            arrival_s,
                            prompt_tokens,
                            reply_tokens: completion_tokens,
                            max_tokens,
                        });
                    }
                    finished.push((
                        stream,
                        StreamEvent::Finished {
                            reason,
                            prompt_tokens,
                            completion_tokens,
                        },
                    ));
                }
            }
        }
        for stream in order {
            let batch = tokens.remove(&stream).unwrap_or_default();
            let delivered = self
                .senders
                .get(&stream)
                .is_some_and(|sender| sender.try_send(StreamEvent::Tokens(batch)).is_ok());
            if !delivered {
                self.drop_stream(stream);
            }
        }
        for (stream, event) in finished {
            if let Some(sender) = self.senders.remove(&stream) {
                let _ = sender.try_send(event);
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            slots: self.engine.slots(),
            counters: self.engine.counters(),
            queue_depth: self.engine.queue_depth(),
            live_streams: self.engine.live_streams(),
            paused_streams: self.engine.paused_streams(),
            tokens_per_second: self.rate.per_second(),
            prompt_cache: self.engine.prompt_cache_usage(),
            advice: self.recorder.as_ref().and_then(Recorder::advice),
        }
    }
}

/// Tokens per second over a sliding window of recent rounds.
#[derive(Default)]
struct TokenRate {
    samples: std::collections::VecDeque<(Instant, u64)>,
}

/// The window over which `/metrics` reports tokens per second.
const RATE_WINDOW: Duration = Duration::from_secs(10);

impl TokenRate {
    fn record(&mut self, total_tokens: u64) {
        let now = Instant::now();
        self.samples.push_back((now, total_tokens));
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW)
        {
            self.samples.pop_front();
        }
    }

    fn per_second(&self) -> f64 {
        match (self.samples.front(), self.samples.back()) {
            (Some((t0, n0)), Some((t1, n1))) if t1 > t0 => {
                (n1 - n0) as f64 / t1.duration_since(*t0).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}
