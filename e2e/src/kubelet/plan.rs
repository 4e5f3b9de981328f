//! What a pod's containers are to do, read from its simulation annotations and env (the
//! table in the [module docs](super)).

use k8s_openapi::api::core::v1::Pod;

use super::{ENV_EXIT_CODE, ENV_RUN_SECONDS, EXIT_CODE, RUN_SECONDS, START_SECONDS, STOP_SECONDS};

/// What a pod's containers do.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Plan {
    pub(super) run: Option<f64>,
    pub(super) exit: i32,
    pub(super) start: Option<f64>,
    pub(super) stop: f64,
}

fn parse_secs(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
}

fn parse_exit(v: &str) -> Option<i32> {
    v.trim()
        .parse::<i32>()
        .ok()
        .filter(|x| (0..=255).contains(x))
}

/// The plan of a pod, and the problems found in its annotations/env.
pub(super) fn plan_of(pod: &Pod) -> (Plan, Vec<String>) {
    let ann = pod.metadata.annotations.clone().unwrap_or_default();
    let env = |name: &str| -> Option<String> {
        pod.spec.as_ref()?.containers.iter().find_map(|c| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        })
    };
    let mut problems = Vec::new();
    let mut secs = |key: &str, env_key: Option<&str>| -> Option<f64> {
        let (src, v) = match ann.get(key) {
            Some(v) => (format!("annotation {key}"), v.clone()),
            None => match env_key.and_then(env) {
                Some(v) => (format!("env {}", env_key.unwrap_or_default()), v),
                None => return None,
            },
        };
        let p = parse_secs(&v);
        if p.is_none() {
            problems.push(format!(
                "{src}: {v:?} is not a duration: give seconds as a non-negative number, e.g. \"30\" or \"0.5\""
            ));
        }
        p
    };
    let run = secs(RUN_SECONDS, Some(ENV_RUN_SECONDS));
    let start = secs(START_SECONDS, None);
    let stop = secs(STOP_SECONDS, None).unwrap_or(0.0);
    let exit = match ann
        .get(EXIT_CODE)
        .map(|v| (format!("annotation {EXIT_CODE}"), v.clone()))
        .or_else(|| env(ENV_EXIT_CODE).map(|v| (format!("env {ENV_EXIT_CODE}"), v)))
    {
        None => 0,
        Some((src, v)) => parse_exit(&v).unwrap_or_else(|| {
            problems.push(format!(
                "{src}: {v:?} is not an exit code: give an integer from 0 to 255"
            ));
            0
        }),
    };
    (
        Plan {
            run,
            exit,
            start,
            stop,
        },
        problems,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(ann: Value, env: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "busybox", "env": env}]}
        }))
        .unwrap()
    }

    #[test]
    fn plans_come_from_annotations_then_env() {
        let (p, errs) = plan_of(&pod(json!({RUN_SECONDS: "2.5", EXIT_CODE: "3"}), json!([])));
        assert_eq!((p.run, p.exit), (Some(2.5), 3));
        assert!(errs.is_empty());
        let (p, _) = plan_of(&pod(
            json!({}),
            json!([{"name": ENV_RUN_SECONDS, "value": "7"}, {"name": ENV_EXIT_CODE, "value": "1"}]),
        ));
        assert_eq!((p.run, p.exit), (Some(7.0), 1));
        let (p, _) = plan_of(&pod(
            json!({RUN_SECONDS: "1"}),
            json!([{"name": ENV_RUN_SECONDS, "value": "7"}]),
        ));
        assert_eq!(p.run, Some(1.0), "the annotation wins");
        let (p, _) = plan_of(&pod(json!({}), json!([])));
        assert_eq!(p.run, None);
    }

    #[test]
    fn bad_values_are_named() {
        let (p, errs) = plan_of(&pod(
            json!({RUN_SECONDS: "soon", EXIT_CODE: "300"}),
            json!([]),
        ));
        assert_eq!((p.run, p.exit), (None, 0));
        assert_eq!(errs.len(), 2);
        assert!(
            errs[0].contains(RUN_SECONDS) && errs[0].contains("non-negative"),
            "{}",
            errs[0]
        );
        assert!(
            errs[1].contains(EXIT_CODE) && errs[1].contains("0 to 255"),
            "{}",
            errs[1]
        );
    }
}
