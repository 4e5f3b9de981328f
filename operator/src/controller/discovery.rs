//! What the API server serves that changes how Muster binds and groups pods: Dynamic Resource
//! Allocation (`resource.k8s.io/v1`) and Kubernetes' gang API (`scheduling.k8s.io`
//! Workload/PodGroup). Found by API discovery at start and every [`INTERVAL`] (an alpha API
//! is switched on by restarting the API server with a flag; the operator follows without a
//! restart of its own).

use std::time::Duration;

use kube::Client;

use super::gang::GangApi;

/// How often discovery runs again.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// What discovery found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `resource.k8s.io/v1` is served (ResourceClaims, ResourceSlices, DeviceClasses).
    pub resource_v1: bool,
    /// The gang API to use, if any.
    pub gang: Option<GangApi>,
}

/// The resources of `group_version`, or `None` where it is not served (404).
async fn resources(
    client: &Client,
    group_version: &str,
) -> Result<Option<Vec<String>>, kube::Error> {
    match client.list_api_group_resources(group_version).await {
        Ok(l) => Ok(Some(l.resources.into_iter().map(|r| r.name).collect())),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Asks the API server what it serves.
pub async fn discover(client: &Client) -> Result<Capabilities, kube::Error> {
    let resource_v1 = resources(client, "resource.k8s.io/v1")
        .await?
        .is_some_and(|r| r.iter().any(|x| x == "resourceclaims"));
    let groups = client.list_api_groups().await?;
    let mut served: Vec<(String, Vec<String>)> = Vec::new();
    if let Some(g) = groups.groups.iter().find(|g| g.name == super::gang::GROUP) {
        for v in &g.versions {
            if v.version.starts_with("v1alpha")
                && let Some(r) = resources(client, &v.group_version).await?
            {
                served.push((v.version.clone(), r));
            }
        }
    }
    let gang = GangApi::choose(served.iter().map(|(v, r)| (v.as_str(), r.as_slice())));
    Ok(Capabilities { resource_v1, gang })
}
