//! Reading the objects the commands format, and finding jobs by Slurm id.

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use muster_crds::v1alpha1::{BatchJob, GpuNode, Partition};

use crate::cluster::Cluster;

/// BatchJobs of the current namespace, or of every namespace.
pub async fn batchjobs(cluster: &Cluster, all_namespaces: bool) -> anyhow::Result<Vec<BatchJob>> {
    let api: Api<BatchJob> = if all_namespaces {
        Api::all(cluster.client.clone())
    } else {
        Api::namespaced(cluster.client.clone(), &cluster.namespace)
    };
    let list = api.list(&ListParams::default()).await.with_context(|| {
        if all_namespaces {
            "cannot list BatchJobs in all namespaces".to_string()
        } else {
            format!("cannot list BatchJobs in namespace {}", cluster.namespace)
        }
    })?;
    Ok(list.items)
}

/// Every Partition.
pub async fn partitions(cluster: &Cluster) -> anyhow::Result<Vec<Partition>> {
    let api: Api<Partition> = Api::all(cluster.client.clone());
    Ok(api
        .list(&ListParams::default())
        .await
        .context("cannot list Partitions (is the Muster CRD installed?)")?
        .items)
}

/// Every Node.
pub async fn nodes(cluster: &Cluster) -> anyhow::Result<Vec<Node>> {
    let api: Api<Node> = Api::all(cluster.client.clone());
    Ok(api
        .list(&ListParams::default())
        .await
        .context("cannot list Nodes")?
        .items)
}

/// Every GpuNode; none when they cannot be read (no node agent installed).
pub async fn gpunodes(cluster: &Cluster) -> Vec<GpuNode> {
    let api: Api<GpuNode> = Api::all(cluster.client.clone());
    match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list GpuNodes");
            Vec::new()
        }
    }
}

/// The access modes of the PersistentVolumeClaims of the cluster's namespace (what submission
/// judges partition filesystems by); empty when they cannot be listed (RBAC): no claim is
/// judged then, as the admission webhook judges them anyway.
pub async fn volume_claims(
    cluster: &Cluster,
) -> Vec<muster_operator::controller::validate::ClaimModes> {
    let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(cluster.client.clone(), &cluster.namespace);
    match api.list(&ListParams::default()).await {
        Ok(l) => l
            .items
            .iter()
            .map(muster_operator::controller::validate::ClaimModes::of)
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "cannot list PersistentVolumeClaims");
            Vec::new()
        }
    }
}

/// The operator's persisted fair-share usage (ConfigMap `muster-fairshare` in the operator's
/// namespace `operator_ns`). `None` when it cannot be read (not there yet, or RBAC):
/// priorities are then computed without usage.
pub async fn fair_share_usage(
    cluster: &Cluster,
    operator_ns: &str,
) -> Option<muster_operator::controller::usage::Record> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use muster_operator::controller::usage::{CONFIGMAP, Record};
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), operator_ns);
    match api.get_opt(CONFIGMAP).await {
        Ok(cm) => cm.as_ref().and_then(Record::from_configmap),
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the fair-share usage");
            None
        }
    }
}

/// BatchJobs of every namespace when allowed (node states need every allocation), else of
/// the current namespace.
pub async fn batchjobs_all_or_own(cluster: &Cluster) -> anyhow::Result<Vec<BatchJob>> {
    match batchjobs(cluster, true).await {
        Ok(v) => Ok(v),
        Err(e) => {
            tracing::debug!(error = %e, "falling back to the current namespace");
            batchjobs(cluster, false).await
        }
    }
}
