//! The daemon's connections: `srun`'s requests over authenticated channels, and connecting to
//! another node's daemon.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::net::{TcpListener, TcpStream};

use crate::step::proto::{Channel, Credential, Frame, Msg, ProtoError};

use super::Daemon;

/// Connects and authenticates to `node`'s daemon.
pub async fn connect(
    node: &str,
    port: u16,
    cred: &Credential,
) -> Result<Channel<TcpStream>, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((node, port))
        .await
        .map_err(|e| format!("resolving {node}: {e}"))?
        .collect();
    let mut last = format!("{node} has no address");
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Channel::connect(s, cred)
                    .await
                    .map_err(|e| format!("{node} ({a}): {e}"));
            }
            Err(e) => last = format!("connecting to {node} ({a}): {e}"),
        }
    }
    Err(last)
}

pub(super) async fn accept_loop(d: Arc<Daemon>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((s, peer)) => {
                let _ = s.set_nodelay(true);
                let d = d.clone();
                tokio::spawn(async move {
                    let ch = match tokio::time::timeout(
                        Duration::from_secs(10),
                        Channel::accept(s, &d.cred),
                    )
                    .await
                    {
                        Ok(Ok(ch)) => ch,
                        Ok(Err(ProtoError::Auth)) => {
                            eprintln!(
                                "muster-step: refused a connection from {peer}: it does not hold this job's step credential"
                            );
                            return;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    d.serve(ch).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

impl Daemon {
    async fn serve(self: Arc<Self>, mut ch: Channel<TcpStream>) {
        let first = match ch.recv().await {
            Ok(Frame::Msg(m)) => m,
            _ => return,
        };
        match first {
            Msg::Ping => {
                let _ = ch
                    .send(&Msg::Pong {
                        node: self.node.name.clone(),
                    })
                    .await;
            }
            Msg::AllocStep => {
                let reply = if self.is_batch_host() {
                    let mut st = self.state.lock().expect("state");
                    let id = st.next_step;
                    st.next_step += 1;
                    Msg::StepId { id }
                } else {
                    Msg::Refused {
                        error: format!(
                            "step ids are numbered by the batch host {}",
                            self.job.batch_host()
                        ),
                    }
                };
                let _ = ch.send(&reply).await;
            }
            Msg::JobEnd => {
                self.terminate_all(Signal::SIGTERM);
                let d = self.clone();
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(d.kill_wait + Duration::from_secs(1), d.wait_idle())
                            .await;
                    let _ = d.shutdown.send(Some(0));
                });
                drop(ch);
            }
            Msg::Launch(req) => self.launch(*req, ch).await,
            other => {
                let _ = ch
                    .send(&Msg::Refused {
                        error: format!("unexpected request {other:?}"),
                    })
                    .await;
            }
        }
    }
}
