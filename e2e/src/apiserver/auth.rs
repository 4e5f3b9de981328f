//! Authentication, as kube-apiserver does it with a static token file and anonymous requests
//! enabled: who sent each request ([`UserInfo`]), which the admission webhooks are told
//! (`request.userInfo`) and `SelfSubjectReview` (`kubectl auth whoami`) returns.
//!
//! - `Authorization: Bearer TOKEN` with a known token: that user (`--token-auth-file`). An
//!   unknown token is refused with 401, as kube-apiserver refuses it.
//! - No credentials: `system:anonymous` in group `system:unauthenticated`.
//! - Impersonation (`kubectl --as`/`--as-group`, `Impersonate-User`, `Impersonate-Group`,
//!   `Impersonate-Uid`, `Impersonate-Extra-*`): the impersonated user, with
//!   `system:authenticated` added (and the service-account groups for
//!   `system:serviceaccount:NS:NAME`). The double has no RBAC; only members of
//!   `system:masters` may impersonate (kube-apiserver's RBAC gives them every verb), others
//!   get 403 as an RBAC denial would say.
//!
//! Every authenticated user is in `system:authenticated`. The double's own kubeconfig and
//! [`ApiServer::client`](super::ApiServer::client) carry [`ADMIN_TOKEN`], for the user
//! `kubernetes-admin` in `system:masters` — as kind's kubeconfig does with a client
//! certificate.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::ApiError;

/// The token of the double's default user, `kubernetes-admin` (group `system:masters`).
pub const ADMIN_TOKEN: &str = "muster-test-admin-token";
/// The default user's name.
pub const ADMIN_USER: &str = "kubernetes-admin";

/// Who sent a request (`authentication.k8s.io/v1` `UserInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user name.
    pub username: String,
    /// A unique id, when the authenticator gives one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with these groups (`system:authenticated` is added).
    pub fn new(name: &str, groups: &[&str]) -> Self {
        let mut u = UserInfo {
            username: name.to_string(),
            uid: format!("uid-{name}"),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: BTreeMap::new(),
        };
        u.add_group("system:authenticated");
        u
    }

    /// The service account `namespace/name`, with the groups kube-apiserver gives it.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo::new(
            &format!("system:serviceaccount:{namespace}:{name}"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{namespace}"),
            ],
        )
    }

    /// The anonymous user.
    pub fn anonymous() -> Self {
        UserInfo {
            username: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    /// The default user of the double's kubeconfig.
    pub fn admin() -> Self {
        UserInfo::new(ADMIN_USER, &["system:masters"])
    }

    fn add_group(&mut self, g: &str) {
        if !self.groups.iter().any(|x| x == g) {
            self.groups.push(g.to_string());
        }
    }

    /// As `request.userInfo` in an AdmissionReview.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "username": self.username,
            "uid": self.uid,
            "groups": self.groups,
            "extra": self.extra,
        })
    }
}

/// Known bearer tokens.
#[derive(Debug, Default)]
pub struct Tokens {
    by_token: RwLock<HashMap<String, UserInfo>>,
}

impl Tokens {
    /// With the default admin token.
    pub fn with_admin() -> Self {
        let t = Tokens::default();
        t.add(ADMIN_TOKEN, UserInfo::admin());
        t
    }

    /// Accept `token` as `user`.
    pub fn add(&self, token: &str, user: UserInfo) {
        self.by_token
            .write()
            .expect("tokens lock")
            .insert(token.to_string(), user);
    }

    fn get(&self, token: &str) -> Option<UserInfo> {
        self.by_token
            .read()
            .expect("tokens lock")
            .get(token)
            .cloned()
    }

    /// Who sent a request with these headers.
    pub fn authenticate(&self, h: &HeaderMap) -> Result<UserInfo, ApiError> {
        let user = match h
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        {
            None => UserInfo::anonymous(),
            Some(v) => {
                let token = v
                    .strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
                    .map(str::trim)
                    .unwrap_or("");
                self.get(token).ok_or_else(unauthorized)?
            }
        };
        impersonate(user, h)
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// Applies `Impersonate-*` headers.
fn impersonate(user: UserInfo, h: &HeaderMap) -> Result<UserInfo, ApiError> {
    let values = |name: &str| -> Vec<String> {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let as_user = values("impersonate-user").into_iter().next();
    let groups = values("impersonate-group");
    let uid = values("impersonate-uid").into_iter().next();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in h {
        if let Some(key) = k.as_str().strip_prefix("impersonate-extra-")
            && let Ok(v) = v.to_str()
        {
            let key = form_urlencoded::parse(format!("k={key}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_else(|| key.to_string());
            extra.entry(key).or_default().push(v.to_string());
        }
    }
    let Some(name) = as_user else {
        if !groups.is_empty() || uid.is_some() || !extra.is_empty() {
            return Err(ApiError::internal(
                "requested [{Groups ...}] without impersonating a user",
            ));
        }
        return Ok(user);
    };
    if !user.groups.iter().any(|g| g == "system:masters") {
        return Err(ApiError::forbidden(format!(
            "users \"{name}\" is forbidden: User \"{}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
            user.username
        )));
    }
    let mut out = match name
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, sa)) if groups.is_empty() => UserInfo::service_account(ns, sa),
        _ => {
            let g: Vec<&str> = groups.iter().map(String::as_str).collect();
            UserInfo::new(&name, &g)
        }
    };
    out.uid = uid.unwrap_or_default();
    out.extra = extra;
    Ok(out)
}

/// `SelfSubjectReview` (`POST /apis/authentication.k8s.io/v1/selfsubjectreviews`): the
/// request's own user.
pub fn self_subject_review(user: &UserInfo, version: &str) -> serde_json::Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": format!("authentication.k8s.io/{version}"),
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": user.to_json()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn tokens_anonymous_and_impersonation() {
        let t = Tokens::with_admin();
        t.add("alice-token", UserInfo::new("alice", &["ml"]));
        let anon = t.authenticate(&headers(&[])).unwrap();
        assert_eq!(anon.username, "system:anonymous");
        assert_eq!(anon.groups, ["system:unauthenticated"]);
        let alice = t
            .authenticate(&headers(&[("authorization", "Bearer alice-token")]))
            .unwrap();
        assert_eq!(alice.username, "alice");
        assert_eq!(alice.groups, ["ml", "system:authenticated"]);
        let e = t
            .authenticate(&headers(&[("authorization", "Bearer nope")]))
            .unwrap_err();
        assert_eq!(e.code, 401);
        // Only system:masters may impersonate.
        let e = t
            .authenticate(&headers(&[
                ("authorization", "Bearer alice-token"),
                ("impersonate-user", "bob"),
            ]))
            .unwrap_err();
        assert_eq!(e.code, 403);
        let bob = t
            .authenticate(&headers(&[
                ("authorization", &format!("Bearer {ADMIN_TOKEN}")),
                ("impersonate-user", "bob"),
                ("impersonate-group", "team-a"),
                ("impersonate-extra-scopes", "view"),
            ]))
            .unwrap();
        assert_eq!(bob.username, "bob");
        assert_eq!(bob.groups, ["team-a", "system:authenticated"]);
        assert_eq!(bob.extra["scopes"], ["view"]);
        let sa = t
            .authenticate(&headers(&[
                ("authorization", &format!("Bearer {ADMIN_TOKEN}")),
                ("impersonate-user", "system:serviceaccount:ml:runner"),
            ]))
            .unwrap();
        assert!(sa.groups.contains(&"system:serviceaccounts:ml".to_string()));
    }
}
