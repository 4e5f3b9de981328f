//! Node lifecycle: losing and recovering a node (conditions, unreachable taints, the taint
//! manager's evictions) and the GpuNode heartbeat.

use futures::FutureExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use muster_crds::v1alpha1::{GpuHealth, GpuNode};
use muster_operator::core::cluster_spec::NodeInfo;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::KubeletError;
use super::pod::State;
use super::sim::Sim;
use super::status::cond;
use super::writes::{MiscFut, with_retries};
use crate::nodes::{self, TAINT_UNREACHABLE};

pub(super) struct SimNode {
    pub(super) info: NodeInfo,
    pub(super) index: usize,
    pub(super) failed: Option<Timestamp>,
    pub(super) health: Vec<GpuHealth>,
    pub(super) next_ip: u32,
}

impl Sim {
    fn node_names(&self, node: &str) -> Result<(), KubeletError> {
        if self.nodes.contains_key(node) {
            Ok(())
        } else {
            Err(KubeletError::NoSuchNode(node.to_string()))
        }
    }

    fn gpunode_write(&self, node: &str) -> Option<MiscFut> {
        if !self.opts.gpunodes {
            return None;
        }
        let n = self.nodes.get(node)?;
        if n.info.gpus.is_empty() {
            return None;
        }
        let status = nodes::gpunode_status(&n.info, &n.health, self.clock.now());
        let api: Api<GpuNode> = Api::all(self.client.clone());
        let name = node.to_string();
        Some(
            async move {
                if let Err(e) =
                    with_retries(|| nodes::apply_gpunode_status(&api, &name, &status)).await
                {
                    tracing::warn!(node = %name, error = %e, "GpuNode heartbeat failed");
                }
            }
            .boxed(),
        )
    }

    pub(super) fn heartbeat(&mut self) {
        let live: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.failed.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for n in live {
            if let Some(f) = self.gpunode_write(&n) {
                self.misc.push_back(f);
            }
        }
    }

    /// Pods on `node` get `Ready` = `ready` (the node lifecycle controller / the kubelet).
    fn mark_pods(&mut self, node: &str, ready: bool) {
        let now = self.clock.now();
        let targets: Vec<(String, String, bool)> = self
            .pods
            .values()
            .filter(|p| p.node == node && matches!(p.state, State::Running { .. }))
            .map(|p| (p.ns.clone(), p.name.clone(), p.busy))
            .collect();
        for (ns, name, _) in targets {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let mut conds = vec![cond("Ready", ready, now, None, None)];
            if ready {
                conds.push(cond("ContainersReady", true, now, None, None));
            }
            let patch = json!({"status": {"conditions": conds}});
            self.misc.push_back(
                async move {
                    let _ = with_retries(|| {
                        let (api, name, patch) = (api.clone(), name.clone(), patch.clone());
                        async move {
                            api.patch_status(
                                &name,
                                &PatchParams::default(),
                                &Patch::Strategic(patch),
                            )
                            .await
                        }
                    })
                    .await;
                }
                .boxed(),
            );
        }
    }

    pub(super) fn fail_node(
        &mut self,
        node: &str,
        reply: oneshot::Sender<Result<(), KubeletError>>,
    ) {
        if let Err(e) = self.node_names(node) {
            let _ = reply.send(Err(e));
            return;
        }
        let now = self.clock.now();
        let n = self.nodes.get_mut(node).expect("checked");
        if n.failed.is_some() {
            let _ = reply.send(Ok(()));
            return;
        }
        n.failed = Some(now);
        let api: Api<Node> = Api::all(self.client.clone());
        let name = node.to_string();
        self.misc.push_back(
            async move {
                let r = set_node_down(&api, &name, now, true).await;
                let _ = reply.send(r);
            }
            .boxed(),
        );
        self.mark_pods(node, false);
        let uids: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.node == node)
            .map(|p| p.uid.clone())
            .collect();
        for u in uids {
            self.schedule(&u);
        }
    }

    pub(super) fn recover_node(
        &mut self,
        node: &str,
        reply: oneshot::Sender<Result<(), KubeletError>>,
    ) {
        if let Err(e) = self.node_names(node) {
            let _ = reply.send(Err(e));
            return;
        }
        let now = self.clock.now();
        let n = self.nodes.get_mut(node).expect("checked");
        if n.failed.take().is_none() {
            let _ = reply.send(Ok(()));
            return;
        }
        let api: Api<Node> = Api::all(self.client.clone());
        let name = node.to_string();
        let gpu = self.gpunode_write(node);
        self.misc.push_back(
            async move {
                let r = set_node_down(&api, &name, now, false).await;
                if let Some(g) = gpu {
                    g.await;
                }
                let _ = reply.send(r);
            }
            .boxed(),
        );
        self.mark_pods(node, true);
        let uids: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.node == node)
            .map(|p| p.uid.clone())
            .collect();
        for u in uids {
            // Deletions seen while the node was down are carried out from now on.
            if let Some(p) = self.pods.get_mut(&u)
                && let Some((seen, _)) = &mut p.deleting
            {
                *seen = now;
            }
            self.schedule(&u);
        }
    }

    pub(super) fn gpu_health(
        &mut self,
        node: &str,
        index: u32,
        health: GpuHealth,
        reply: oneshot::Sender<Result<(), KubeletError>>,
    ) {
        let Some(n) = self.nodes.get_mut(node) else {
            let _ = reply.send(Err(KubeletError::NoSuchNode(node.to_string())));
            return;
        };
        let Some(slot) = n.health.get_mut(index as usize) else {
            let _ = reply.send(Err(KubeletError::NoSuchGpu {
                node: node.to_string(),
                index,
                count: n.health.len(),
            }));
            return;
        };
        *slot = health;
        let status = nodes::gpunode_status(&n.info, &n.health, self.clock.now());
        let api: Api<GpuNode> = Api::all(self.client.clone());
        let name = node.to_string();
        self.misc.push_back(
            async move {
                let r = with_retries(|| nodes::apply_gpunode_status(&api, &name, &status))
                    .await
                    .map_err(|e| KubeletError::Write {
                        what: format!("GpuNode {name}"),
                        error: e.to_string(),
                    });
                let _ = reply.send(r);
            }
            .boxed(),
        );
    }
}

/// Write a node's loss (`down`) or return: conditions and the unreachable taints.
async fn set_node_down(
    api: &Api<Node>,
    name: &str,
    now: Timestamp,
    down: bool,
) -> Result<(), KubeletError> {
    let werr = |e: kube::Error| KubeletError::Write {
        what: format!("Node {name}"),
        error: e.to_string(),
    };
    with_retries(|| async {
        let node = api.get(name).await?;
        let mut taints: Vec<Value> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.key != TAINT_UNREACHABLE)
            .map(|t| serde_json::to_value(t).expect("taint"))
            .collect();
        if down {
            for effect in ["NoSchedule", "NoExecute"] {
                taints.push(
                    json!({"key": TAINT_UNREACHABLE, "effect": effect, "timeAdded": Time(now)}),
                );
            }
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": if taints.is_empty() { Value::Null } else { json!(taints) }},
        });
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
    })
    .await
    .map_err(werr)?;
    let conditions = if down {
        nodes::unknown_conditions(now)
    } else {
        nodes::ready_conditions(now)
    };
    with_retries(|| {
        let patch = Patch::Merge(json!({"status": {"conditions": conditions.clone()}}));
        async move {
            api.patch_status(name, &PatchParams::default(), &patch)
                .await
        }
    })
    .await
    .map_err(werr)?;
    Ok(())
}
