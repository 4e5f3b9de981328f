//! Changing a BatchJob as the commands that act on jobs do: a merge patch built from the job
//! as read, with its resourceVersion as the precondition (a change made meanwhile is not
//! overwritten: the patch is built again from the new version), and the reason admission
//! gave when it refuses.

use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::core::ResourceExt;
use muster_crds::v1alpha1::BatchJob;
use serde_json::Value;

/// What the API server answered, for the user: the reason of an admission webhook's refusal
/// (the text after "denied the request: "), else its message.
pub fn refusal(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s
            .message
            .split_once("denied the request: ")
            .map_or(s.message.clone(), |(_, m)| m.to_string()),
        other => other.to_string(),
    }
}

/// Reads `name`, patches it with `change(job)` (a merge patch; `Err` stops with that
/// message) under the version read, and tries again (up to five times) when it changed
/// meanwhile. `Err`: the message for the user.
pub async fn update(
    api: &Api<BatchJob>,
    name: &str,
    change: impl Fn(&BatchJob) -> Result<Value, String>,
) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..5 {
        let job = api.get(name).await.map_err(|e| refusal(&e))?;
        let mut patch = change(&job)?;
        patch["metadata"]["resourceVersion"] = job.resource_version().into();
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => last = s.message,
            Err(e) => return Err(refusal(&e)),
        }
    }
    Err(format!("{name} kept changing: {last}"))
}
