//! Who may raise a job's priority. A fixed `--priority` replaces the priority the scheduler
//! computes (age, size, fair share), and a negative `--nice` adds to it: either lets a job
//! pass every other in its partition. As in Slurm ("Only Slurm operators and administrators
//! can set the priority of a job"; "Only privileged users can specify a negative
//! adjustment"), only administrators may; anyone may lower their own job's priority (a nice
//! of 0 or more, a fixed priority made lower). Slurm 22.05 silently ignores a user's
//! `--priority`; Muster refuses it, naming the field, so nothing asked for is dropped.

use muster_crds::v1alpha1::BatchJobSpec;

/// The users and groups (as the API server authenticates them) who may raise priorities:
/// Slurm's operators and administrators. The operator's own identity is always trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admins {
    /// Groups whose members are administrators.
    pub groups: Vec<String>,
    /// Users who are administrators.
    pub users: Vec<String>,
}

/// `system:masters`: the cluster's administrators (kube-apiserver gives them every verb).
pub const MASTERS: &str = "system:masters";

impl Default for Admins {
    fn default() -> Self {
        Admins {
            groups: vec![MASTERS.to_string()],
            users: Vec::new(),
        }
    }
}

impl Admins {
    /// Whether `user`, in `groups`, is an administrator.
    pub fn contains(&self, user: &str, groups: &[String]) -> bool {
        self.users.iter().any(|u| u == user) || groups.iter().any(|g| self.groups.contains(g))
    }

    /// Who they are, for a refusal: `group system:masters, user alice`.
    fn describe(&self) -> String {
        let mut who: Vec<String> = self.groups.iter().map(|g| format!("group {g}")).collect();
        who.extend(self.users.iter().map(|u| format!("user {u}")));
        if who.is_empty() {
            "none are configured".into()
        } else {
            who.join(", ")
        }
    }
}

/// Slurm's error for what only its operators may do.
const DENIED: &str = "Access/permission denied";

/// Why a user who is not an administrator may not go from `old` (`None`: a new job) to
/// `new`, if they may not: the field, what it would do, and what is allowed.
pub fn raise(old: Option<&BatchJobSpec>, new: &BatchJobSpec, admins: &Admins) -> Option<String> {
    let who = admins.describe();
    let old_nice = old.and_then(|o| o.nice).unwrap_or(0);
    if let Some(n) = new.nice
        && n < 0
        && n < old_nice
    {
        return Some(format!(
            "{DENIED}: spec.nice (--nice) {n} raises the job's priority; only administrators \
             ({who}) may give a negative nice; a nice of 0 or more lowers it"
        ));
    }
    let old_fixed = old.and_then(|o| o.priority);
    match (old_fixed, new.priority) {
        (o, n) if o == n => None,
        (Some(o), Some(n)) if n < o => None,
        (_, n) => {
            let what = match (old_fixed, n) {
                (None, Some(n)) => format!("{n} would replace the computed priority"),
                (Some(o), Some(n)) => format!("{n} would raise the job's priority from {o}"),
                (Some(_), None) => "cleared would restore the computed priority".to_string(),
                (None, None) => unreachable!("equal values return above"),
            };
            Some(format!(
                "{DENIED}: spec.priority (--priority) {what}; only administrators ({who}) may \
                 set, raise or clear it; lower your job's priority with --nice (scontrol update \
                 Nice=N)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nice: Option<i32>, priority: Option<u32>) -> BatchJobSpec {
        BatchJobSpec {
            nice,
            priority,
            ..Default::default()
        }
    }

    #[test]
    fn administrators_are_the_configured_users_and_groups() {
        let a = Admins {
            groups: vec!["hpc-admins".into()],
            users: vec!["root".into()],
        };
        assert!(a.contains("root", &[]));
        assert!(a.contains("bob", &["x".into(), "hpc-admins".into()]));
        assert!(!a.contains("bob", &["system:masters".into()]));
        assert!(Admins::default().contains("kubernetes-admin", &[MASTERS.into()]));
    }

    #[test]
    fn a_user_may_lower_a_priority_but_not_raise_one() {
        let a = Admins::default();
        // New jobs: a nice of 0 or more, no fixed priority.
        assert_eq!(raise(None, &spec(Some(10), None), &a), None);
        assert_eq!(raise(None, &spec(Some(0), None), &a), None);
        let e = raise(None, &spec(Some(-5), None), &a).unwrap();
        assert_eq!(
            e,
            "Access/permission denied: spec.nice (--nice) -5 raises the job's priority; only \
             administrators (group system:masters) may give a negative nice; a nice of 0 or \
             more lowers it"
        );
        let e = raise(None, &spec(None, Some(100)), &a).unwrap();
        assert!(
            e.starts_with(
                "Access/permission denied: spec.priority (--priority) 100 would replace the \
                 computed priority; only administrators (group system:masters) may set, raise \
                 or clear it"
            ),
            "{e}"
        );
        // Updates: an administrator's negative nice may be made less negative, not more;
        // a fixed priority lowered, not raised or cleared.
        let admin_set = spec(Some(-10), Some(500));
        assert_eq!(
            raise(Some(&admin_set), &spec(Some(-3), Some(500)), &a),
            None
        );
        assert_eq!(
            raise(Some(&admin_set), &spec(Some(-10), Some(200)), &a),
            None
        );
        assert!(raise(Some(&admin_set), &spec(Some(-11), Some(500)), &a).is_some());
        let e = raise(Some(&admin_set), &spec(Some(-10), Some(501)), &a).unwrap();
        assert!(
            e.contains("501 would raise the job's priority from 500"),
            "{e}"
        );
        let e = raise(Some(&admin_set), &spec(Some(-10), None), &a).unwrap();
        assert!(
            e.contains("cleared would restore the computed priority"),
            "{e}"
        );
        // Unchanged values pass whoever set them.
        assert_eq!(raise(Some(&admin_set), &admin_set, &a), None);
        let none = Admins {
            groups: vec![],
            users: vec![],
        };
        assert!(
            raise(None, &spec(Some(-1), None), &none)
                .unwrap()
                .contains("(none are configured)")
        );
    }
}
