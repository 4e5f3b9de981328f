//! The step channel: how `srun` (and node daemons among themselves) talk to a node daemon.
//!
//! One TCP connection per request. Both ends hold the job's credential (a key file only the
//! job's pods mount); nothing is accepted from a peer that has not proven it holds the key.
//!
//! # Handshake (mutual challenge/response, HMAC-SHA256 from `ring`)
//! 1. server → client: `MAGIC` and a 32-byte random nonce `ns`.
//! 2. client → server: `MAGIC`, its nonce `nc`, `HMAC(key, "client" ‖ ns ‖ nc)`.
//! 3. server → client: `HMAC(key, "server" ‖ nc ‖ ns)` once the client's tag verified (else it
//!    closes the connection without a word).
//!
//! Both then derive a session key `HMAC(key, "session" ‖ ns ‖ nc)`.
//!
//! # Frames
//! `u32` length (big-endian), payload, 32-byte tag `HMAC(session, dir ‖ seq ‖ payload)` with
//! `dir` `c` (client to server) or `s` and `seq` counting each direction's frames from 0, so
//! frames cannot be forged, replayed, reordered or moved between connections. The channel is
//! not encrypted: commands and output cross the pod network in the clear, as Slurm's I/O does.
//!
//! A payload starts with a kind byte: [`KIND_MSG`] (a JSON [`Msg`]), [`KIND_OUTPUT`] (task
//! output: task rank `u32`, stream `u8`, bytes) or [`KIND_STDIN`] (bytes for the tasks' stdin;
//! empty: end of input).

use std::io;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// First bytes of both hellos (protocol version 1).
pub const MAGIC: &[u8; 8] = b"MSTEP001";
/// Largest frame payload accepted.
pub const MAX_FRAME: usize = 1 << 20;
/// Shortest credential accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;
/// Payload kind: a JSON [`Msg`].
pub const KIND_MSG: u8 = 0;
/// Payload kind: task output.
pub const KIND_OUTPUT: u8 = 1;
/// Payload kind: stdin bytes (empty: EOF).
pub const KIND_STDIN: u8 = 2;

/// Why the channel failed.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// Socket error.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The peer is not a Muster step daemon/client of this version.
    #[error("the peer does not speak the Muster step protocol (bad hello)")]
    BadMagic,
    /// The peer does not hold this job's credential.
    #[error("authentication failed: the peer does not hold this job's step credential")]
    Auth,
    /// A frame failed its integrity check or was malformed.
    #[error("corrupt frame: {0}")]
    Frame(String),
    /// The peer closed the connection.
    #[error("connection closed by the peer")]
    Closed,
}

/// The job's credential.
#[derive(Clone)]
pub struct Credential {
    key: hmac::Key,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(..)")
    }
}

impl Credential {
    /// A credential from the key file's bytes (surrounding whitespace ignored, so a key written
    /// by `kubectl create secret --from-literal` with a newline works).
    pub fn from_bytes(bytes: &[u8]) -> Result<Credential, String> {
        let trimmed = trim_ascii(bytes);
        if trimmed.len() < MIN_KEY_LEN {
            return Err(format!(
                "the step credential has {} bytes; at least {MIN_KEY_LEN} are needed",
                trimmed.len()
            ));
        }
        Ok(Credential {
            key: hmac::Key::new(hmac::HMAC_SHA256, trimmed),
        })
    }

    /// Reads the key file at `path`.
    pub fn from_file(path: &std::path::Path) -> Result<Credential, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("reading the step credential {}: {e}", path.display()))?;
        Credential::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// 32 fresh random bytes, hex-encoded: a new credential for a job.
    pub fn generate() -> String {
        hex(&nonce())
    }

    fn tag(&self, parts: &[&[u8]]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        for p in parts {
            ctx.update(p);
        }
        ctx.sign()
    }

    fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        hmac::verify(&self.key, &parts.concat(), tag).is_ok()
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    SystemRandom::new()
        .fill(&mut n)
        .expect("the operating system's random source failed");
    n
}

/// An authenticated connection (either end).
pub struct Channel<S> {
    stream: S,
    session: hmac::Key,
    send_dir: u8,
    send_seq: u64,
    recv_seq: u64,
}

/// A frame received.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A control message.
    Msg(Msg),
    /// Task output: rank, stream (1 stdout, 2 stderr), bytes.
    Output(u32, u8, Vec<u8>),
    /// Stdin bytes; empty: end of input.
    Stdin(Vec<u8>),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Channel<S> {
    /// The server side of the handshake.
    pub async fn accept(mut stream: S, cred: &Credential) -> Result<Channel<S>, ProtoError> {
        let ns = nonce();
        let mut hello = Vec::with_capacity(40);
        hello.extend_from_slice(MAGIC);
        hello.extend_from_slice(&ns);
        stream.write_all(&hello).await?;
        let mut reply = [0u8; 8 + 32 + 32];
        read_exact(&mut stream, &mut reply).await?;
        if &reply[..8] != MAGIC {
            return Err(ProtoError::BadMagic);
        }
        let nc: [u8; 32] = reply[8..40].try_into().expect("32 bytes");
        if !cred.verify(&[b"client", &ns, &nc], &reply[40..]) {
            return Err(ProtoError::Auth);
        }
        let tag = cred.tag(&[b"server", &nc, &ns]);
        stream.write_all(tag.as_ref()).await?;
        stream.flush().await?;
        Ok(Channel::new(stream, cred, &ns, &nc, b's'))
    }

    /// The client side of the handshake.
    pub async fn connect(mut stream: S, cred: &Credential) -> Result<Channel<S>, ProtoError> {
        let mut hello = [0u8; 40];
        read_exact(&mut stream, &mut hello).await?;
        if &hello[..8] != MAGIC {
            return Err(ProtoError::BadMagic);
        }
        let ns: [u8; 32] = hello[8..].try_into().expect("32 bytes");
        let nc = nonce();
        let tag = cred.tag(&[b"client", &ns, &nc]);
        let mut reply = Vec::with_capacity(72);
        reply.extend_from_slice(MAGIC);
        reply.extend_from_slice(&nc);
        reply.extend_from_slice(tag.as_ref());
        stream.write_all(&reply).await?;
        stream.flush().await?;
        let mut stag = [0u8; 32];
        match read_exact(&mut stream, &mut stag).await {
            Ok(()) => {}
            // The server hangs up on a bad tag: that is the answer.
            Err(ProtoError::Closed) => return Err(ProtoError::Auth),
            Err(e) => return Err(e),
        }
        if !cred.verify(&[b"server", &nc, &ns], &stag) {
            return Err(ProtoError::Auth);
        }
        Ok(Channel::new(stream, cred, &ns, &nc, b'c'))
    }

    fn new(stream: S, cred: &Credential, ns: &[u8], nc: &[u8], send_dir: u8) -> Channel<S> {
        let session = cred.tag(&[b"session", ns, nc]);
        Channel {
            stream,
            session: hmac::Key::new(hmac::HMAC_SHA256, session.as_ref()),
            send_dir,
            send_seq: 0,
            recv_seq: 0,
        }
    }

    /// Splits into independently usable halves (for full-duplex use).
    pub fn split(
        self,
    ) -> (
        Sender<tokio::io::WriteHalf<S>>,
        Receiver<tokio::io::ReadHalf<S>>,
    ) {
        let (r, w) = tokio::io::split(self.stream);
        (
            Sender {
                w,
                session: self.session.clone(),
                dir: self.send_dir,
                seq: self.send_seq,
            },
            Receiver {
                r,
                session: self.session,
                dir: if self.send_dir == b'c' { b's' } else { b'c' },
                seq: self.recv_seq,
            },
        )
    }

    /// Sends a control message.
    pub async fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        let payload = encode_msg(msg);
        write_frame(
            &mut self.stream,
            &self.session,
            self.send_dir,
            &mut self.send_seq,
            &payload,
        )
        .await
    }

    /// Receives the next frame.
    pub async fn recv(&mut self) -> Result<Frame, ProtoError> {
        let dir = if self.send_dir == b'c' { b's' } else { b'c' };
        read_frame(&mut self.stream, &self.session, dir, &mut self.recv_seq).await
    }
}

/// The sending half of a [`Channel`].
pub struct Sender<W> {
    w: W,
    session: hmac::Key,
    dir: u8,
    seq: u64,
}

impl<W: AsyncWrite + Unpin> Sender<W> {
    /// Sends a control message.
    pub async fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        let payload = encode_msg(msg);
        write_frame(
            &mut self.w,
            &self.session,
            self.dir,
            &mut self.seq,
            &payload,
        )
        .await
    }

    /// Sends task output.
    pub async fn output(&mut self, rank: u32, stream: u8, bytes: &[u8]) -> Result<(), ProtoError> {
        let mut payload = Vec::with_capacity(6 + bytes.len());
        payload.push(KIND_OUTPUT);
        payload.extend_from_slice(&rank.to_be_bytes());
        payload.push(stream);
        payload.extend_from_slice(bytes);
        write_frame(
            &mut self.w,
            &self.session,
            self.dir,
            &mut self.seq,
            &payload,
        )
        .await
    }

    /// Sends stdin bytes (empty: EOF).
    pub async fn stdin(&mut self, bytes: &[u8]) -> Result<(), ProtoError> {
        let mut payload = Vec::with_capacity(1 + bytes.len());
        payload.push(KIND_STDIN);
        payload.extend_from_slice(bytes);
        write_frame(
            &mut self.w,
            &self.session,
            self.dir,
            &mut self.seq,
            &payload,
        )
        .await
    }
}

/// The receiving half of a [`Channel`].
pub struct Receiver<R> {
    r: R,
    session: hmac::Key,
    dir: u8,
    seq: u64,
}

impl<R: AsyncRead + Unpin> Receiver<R> {
    /// Receives the next frame.
    pub async fn recv(&mut self) -> Result<Frame, ProtoError> {
        read_frame(&mut self.r, &self.session, self.dir, &mut self.seq).await
    }
}

fn encode_msg(msg: &Msg) -> Vec<u8> {
    let mut payload = vec![KIND_MSG];
    serde_json::to_writer(&mut payload, msg).expect("messages serialize");
    payload
}

async fn read_exact<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<(), ProtoError> {
    match r.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(ProtoError::Closed),
        Err(e) => Err(e.into()),
    }
}

async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    session: &hmac::Key,
    dir: u8,
    seq: &mut u64,
    payload: &[u8],
) -> Result<(), ProtoError> {
    if payload.len() > MAX_FRAME {
        return Err(ProtoError::Frame(format!(
            "frame of {} bytes exceeds {MAX_FRAME}",
            payload.len()
        )));
    }
    let mut ctx = hmac::Context::with_key(session);
    ctx.update(&[dir]);
    ctx.update(&seq.to_be_bytes());
    ctx.update(payload);
    let tag = ctx.sign();
    *seq += 1;
    let mut buf = Vec::with_capacity(4 + payload.len() + 32);
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(payload);
    buf.extend_from_slice(tag.as_ref());
    w.write_all(&buf).await?;
    w.flush().await?;
    Ok(())
}

async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    session: &hmac::Key,
    dir: u8,
    seq: &mut u64,
) -> Result<Frame, ProtoError> {
    let mut len = [0u8; 4];
    read_exact(r, &mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME || len == 0 {
        return Err(ProtoError::Frame(format!("bad frame length {len}")));
    }
    let mut buf = vec![0u8; len + 32];
    read_exact(r, &mut buf).await?;
    let (payload, tag) = buf.split_at(len);
    let mut signed = Vec::with_capacity(9 + len);
    signed.push(dir);
    signed.extend_from_slice(&seq.to_be_bytes());
    signed.extend_from_slice(payload);
    if hmac::verify(session, &signed, tag).is_err() {
        return Err(ProtoError::Frame("integrity check failed".into()));
    }
    *seq += 1;
    decode(payload)
}

fn decode(payload: &[u8]) -> Result<Frame, ProtoError> {
    match payload[0] {
        KIND_MSG => serde_json::from_slice(&payload[1..])
            .map(Frame::Msg)
            .map_err(|e| ProtoError::Frame(format!("bad message: {e}"))),
        KIND_OUTPUT if payload.len() >= 6 => {
            let rank = u32::from_be_bytes(payload[1..5].try_into().expect("4 bytes"));
            Ok(Frame::Output(rank, payload[5], payload[6..].to_vec()))
        }
        KIND_STDIN => Ok(Frame::Stdin(payload[1..].to_vec())),
        k => Err(ProtoError::Frame(format!("unknown frame kind {k}"))),
    }
}

/// How a task ended, as `waitpid` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskStatus {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal (with a core dump or not).
    Signaled(i32, bool),
}

impl TaskStatus {
    /// The shell's view: the code, or 128 + the signal.
    pub fn code(&self) -> i32 {
        match *self {
            TaskStatus::Exited(c) => c,
            TaskStatus::Signaled(s, _) => 128 + s,
        }
    }
}

/// What a step task needs to know about the step as a whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// Job id.
    pub job_id: String,
    /// Step id (0, 1, …).
    pub step_id: u32,
    /// Tasks in the step.
    pub num_tasks: u32,
    /// Nodes of the step, in order.
    pub nodes: Vec<String>,
    /// Tasks on each node of the step.
    pub tasks_per_node: Vec<u32>,
    /// `--cpus-per-task`, if given.
    pub cpus_per_task: Option<u32>,
    /// `--ntasks-per-node`, if given and honoured.
    pub ntasks_per_node: Option<u32>,
    /// `--gpus-per-task`, if any (given or from the job).
    pub gpus_per_task: Option<u32>,
    /// `--gres=gpu:N`: GPUs per node for the step (every task of the node sees them).
    pub gpus_per_node: Option<u32>,
    /// `--gpu-bind`, as given.
    pub gpu_bind: Option<String>,
    /// `--mpi`, as given.
    pub mpi: Option<String>,
    /// `-l`.
    pub label: bool,
    /// The launching srun's address (for `SLURM_LAUNCH_NODE_IPADDR`).
    pub launch_addr: String,
}

/// A request to start the local part of a step on one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchReq {
    /// The step.
    pub step: StepInfo,
    /// This node's index in the step.
    pub node_index: u32,
    /// Global ranks of this node's tasks, in local order.
    pub ranks: Vec<u32>,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory (srun's, or `--chdir`).
    pub cwd: String,
    /// The environment srun passes (after `--export`).
    pub env: Vec<(String, String)>,
    /// Whether tasks read stdin from srun (else `/dev/null`).
    pub stdin: bool,
    /// Only these ranks get stdin (`--input=N`); `None`: all.
    pub stdin_rank: Option<u32>,
}

/// A control message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Msg {
    /// Are you there? Answered with [`Msg::Pong`].
    Ping,
    /// The daemon's node name.
    Pong {
        /// Node name.
        node: String,
    },
    /// Allocate the next step id (node 0's daemon keeps the counter).
    AllocStep,
    /// A new step id.
    StepId {
        /// The id.
        id: u32,
    },
    /// Start tasks.
    Launch(Box<LaunchReq>),
    /// Every task of the request started.
    Launched,
    /// The request was refused (nothing started).
    Refused {
        /// Why (shown as `srun: error: ...`).
        error: String,
    },
    /// Deliver a signal to the step's tasks on this node.
    Signal {
        /// Signal number.
        sig: i32,
    },
    /// Tasks ended.
    Exit {
        /// Ranks that ended this way.
        ranks: Vec<u32>,
        /// How.
        status: TaskStatus,
    },
    /// A message for srun's stderr (a daemon-side error such as a failed exec).
    Notice {
        /// The text (one line).
        text: String,
    },
    /// Every task ended and all output was sent.
    Done,
    /// The job is over (the batch step ended): stop every step and exit.
    JobEnd,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(s: &str) -> Credential {
        Credential::from_bytes(s.as_bytes()).unwrap()
    }

    #[tokio::test]
    async fn matching_keys_talk_and_frames_arrive_in_order() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let k = cred("0123456789abcdef0123456789abcdef\n");
        let k2 = k.clone();
        let server = tokio::spawn(async move {
            let mut ch = Channel::accept(a, &k2).await.unwrap();
            let f = ch.recv().await.unwrap();
            assert_eq!(f, Frame::Msg(Msg::Ping));
            let (mut tx, _rx) = ch.split();
            tx.send(&Msg::Pong { node: "n1".into() }).await.unwrap();
            tx.output(7, 1, b"hello\n").await.unwrap();
        });
        let mut ch = Channel::connect(b, &k).await.unwrap();
        ch.send(&Msg::Ping).await.unwrap();
        assert_eq!(
            ch.recv().await.unwrap(),
            Frame::Msg(Msg::Pong { node: "n1".into() })
        );
        assert_eq!(
            ch.recv().await.unwrap(),
            Frame::Output(7, 1, b"hello\n".to_vec())
        );
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_wrong_key_is_refused_by_both_ends() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            Channel::accept(a, &cred("server-key-server-key"))
                .await
                .err()
        });
        let client = Channel::connect(b, &cred("client-key-client-key")).await;
        assert!(
            matches!(client, Err(ProtoError::Auth)),
            "client saw {:?}",
            client.err()
        );
        assert!(matches!(server.await.unwrap(), Some(ProtoError::Auth)));
    }

    #[tokio::test]
    async fn a_tampered_frame_is_rejected() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let k = cred("0123456789abcdef0123456789abcdef");
        let k2 = k.clone();
        let server = tokio::spawn(async move {
            let mut ch = Channel::accept(a, &k2).await.unwrap();
            ch.recv().await
        });
        // Do the client handshake by hand, then send a frame with a wrong tag.
        let mut hello = [0u8; 40];
        b.read_exact(&mut hello).await.unwrap();
        let nc = [7u8; 32];
        let tag = k.tag(&[b"client", &hello[8..], &nc]);
        let mut reply = MAGIC.to_vec();
        reply.extend_from_slice(&nc);
        reply.extend_from_slice(tag.as_ref());
        b.write_all(&reply).await.unwrap();
        let mut stag = [0u8; 32];
        b.read_exact(&mut stag).await.unwrap();
        let payload = encode_msg(&Msg::Ping);
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&payload);
        frame.extend_from_slice(&[0u8; 32]);
        b.write_all(&frame).await.unwrap();
        let got = server.await.unwrap();
        assert!(matches!(got, Err(ProtoError::Frame(_))), "{got:?}");
    }

    #[test]
    fn short_keys_are_refused_and_generated_ones_are_long() {
        assert!(Credential::from_bytes(b"  short \n").is_err());
        let g = Credential::generate();
        assert_eq!(g.len(), 64);
        assert!(Credential::from_bytes(g.as_bytes()).is_ok());
    }

    #[test]
    fn statuses_read_like_the_shell() {
        assert_eq!(TaskStatus::Exited(3).code(), 3);
        assert_eq!(TaskStatus::Signaled(9, false).code(), 137);
    }
}
