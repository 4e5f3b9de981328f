//! Property tests for the Slurm syntax library: parsers never panic on any input, every
//! accepted value prints in a form that parses back to itself, and generated values round
//! trip through `Display`/`FromStr` and serde.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::str::FromStr;

use muster_crds::slurm::dependency::Combine;
use muster_crds::slurm::hostlist::{compress, compress_sorted, expand};
use muster_crds::slurm::time::format_duration_secs;
use muster_crds::slurm::*;
use proptest::prelude::*;
use proptest::string::string_regex;

/// Characters of every Slurm syntax, so random strings often come close to valid input.
const SYNTAX_CHARS: &str = "[a-zA-Z0-9\\[\\]\\-,:%*&|()@+?._ xX=]{0,24}";

/// If `s` parses, its canonical form parses to the same value, and prints the same.
fn stable<T>(s: &str) -> Result<(), TestCaseError>
where
    T: FromStr + ToString + PartialEq + Debug,
    T::Err: Debug,
{
    if let Ok(v) = s.parse::<T>() {
        let printed = v.to_string();
        let again = printed.parse::<T>();
        prop_assert!(
            again.is_ok(),
            "{s:?} → {printed:?} does not parse: {again:?}"
        );
        let again = again.unwrap();
        prop_assert_eq!(&again, &v, "{:?} → {:?}", s, printed);
        prop_assert_eq!(again.to_string(), printed);
    }
    Ok(())
}

fn all_parsers(s: &str) -> Result<(), TestCaseError> {
    stable::<TimeLimit>(s)?;
    stable::<ArraySpec>(s)?;
    stable::<DependencySpec>(s)?;
    stable::<Constraint>(s)?;
    stable::<GpuBind>(s)?;
    stable::<MemSize>(s)?;
    stable::<NodeRange>(s)?;
    stable::<Switches>(s)?;
    stable::<GpuCount>(s)?;
    stable::<GresItem>(s)?;
    stable::<HostList>(s)?;
    stable::<TasksPerNode>(s)?;
    if let Ok(items) = parse_gres(s) {
        let _ = gpus_from_gres(&items);
        let printed = items
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        if !items.is_empty() {
            prop_assert_eq!(parse_gres(&printed).unwrap(), items);
        }
    }
    if let Ok(names) = expand(s) {
        let _ = compress(&names);
        let _ = compress_sorted(&names);
    }
    let _ = compress(s.split(','));
    let _ = compress_sorted(s.split(','));
    Ok(())
}

/// Round trip through `Display`/`FromStr` and through serde (JSON string).
fn round_trip<T>(v: &T) -> Result<(), TestCaseError>
where
    T: FromStr + ToString + PartialEq + Debug + serde::Serialize + serde::de::DeserializeOwned,
    T::Err: Debug,
{
    let s = v.to_string();
    let back = s.parse::<T>();
    prop_assert!(
        back.is_ok(),
        "{v:?} prints {s:?}, which does not parse: {back:?}"
    );
    prop_assert_eq!(&back.unwrap(), v, "via {:?}", s);
    let json = serde_json::to_string(v).unwrap();
    prop_assert_eq!(json.clone(), serde_json::to_string(&s).unwrap());
    prop_assert_eq!(&serde_json::from_str::<T>(&json).unwrap(), v);
    Ok(())
}

fn time_limit() -> impl Strategy<Value = TimeLimit> {
    prop_oneof![
        Just(TimeLimit::Unlimited),
        (1..=TimeLimit::MAX_MINUTES).prop_map(TimeLimit::Minutes),
        (1u32..5000).prop_map(TimeLimit::Minutes),
    ]
}

fn job_name() -> impl Strategy<Value = String> {
    string_regex("[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?(\\.[a-z0-9]{1,5}){0,2}")
        .unwrap()
        .prop_filter("all digits is an id", |s| {
            !s.bytes().all(|b| b.is_ascii_digit())
        })
}

fn job_ref() -> impl Strategy<Value = JobRef> {
    (
        prop_oneof![
            (1u64..=u64::MAX).prop_map(JobTarget::Id),
            job_name().prop_map(JobTarget::Name)
        ],
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(target, delay_minutes)| JobRef {
            target,
            delay_minutes,
        })
}

fn dependency() -> impl Strategy<Value = DependencySpec> {
    let item = prop_oneof![
        Just(DependencyItem {
            kind: DepKind::Singleton,
            jobs: vec![]
        }),
        (
            prop_oneof![
                Just(DepKind::After),
                Just(DepKind::AfterAny),
                Just(DepKind::AfterOk),
                Just(DepKind::AfterNotOk),
                Just(DepKind::AfterCorr)
            ],
            prop::collection::vec(job_ref(), 1..4)
        )
            .prop_map(|(kind, jobs)| DependencyItem { kind, jobs }),
    ];
    (prop::collection::vec(item, 1..5), any::<bool>()).prop_map(|(items, any)| {
        DependencySpec {
            // The separator of a one-item spec is not visible: it parses as All.
            combine: if any && items.len() > 1 {
                Combine::Any
            } else {
                Combine::All
            },
            items,
        }
    })
}

fn feature() -> impl Strategy<Value = Constraint> {
    string_regex("[a-zA-Z0-9][a-zA-Z0-9_.:=-]{0,6}")
        .unwrap()
        .prop_map(Constraint::Feature)
}

/// An expression of features, `&`, `|` and parentheses (no counts, no brackets).
fn plain_expr() -> impl Strategy<Value = Constraint> {
    feature().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(Constraint::And),
            prop::collection::vec(inner, 2..4).prop_map(Constraint::Or),
        ]
    })
}

/// The normal form `Constraint::parse` returns: nested same-kind groups flattened.
fn normalize(c: Constraint) -> Constraint {
    fn flat(v: Vec<Constraint>, and: bool) -> Vec<Constraint> {
        v.into_iter()
            .map(normalize)
            .flat_map(|c| match c {
                Constraint::And(inner) if and => inner,
                Constraint::Or(inner) if !and => inner,
                other => vec![other],
            })
            .collect()
    }
    match c {
        Constraint::And(v) => Constraint::And(flat(v, true)),
        Constraint::Or(v) => Constraint::Or(flat(v, false)),
        Constraint::Count { expr, nodes } => Constraint::Count {
            expr: Box::new(normalize(*expr)),
            nodes,
        },
        Constraint::MatchingOr(v) => Constraint::MatchingOr(v.into_iter().map(normalize).collect()),
        Constraint::MultipleCounts(v) => {
            Constraint::MultipleCounts(v.into_iter().map(|(c, n)| (normalize(c), n)).collect())
        }
        f => f,
    }
}

/// Any valid constraint: a plain expression, or one count / bracket group, alone or joined
/// with `&` to plain terms.
fn constraint() -> impl Strategy<Value = Constraint> {
    let special = prop_oneof![
        (plain_expr(), 1u32..100).prop_map(|(e, nodes)| Constraint::Count {
            expr: Box::new(e),
            nodes
        }),
        prop::collection::vec(plain_expr(), 1..4).prop_map(Constraint::MatchingOr),
        prop::collection::vec((plain_expr(), 1u32..100), 1..4).prop_map(Constraint::MultipleCounts),
    ];
    prop_oneof![
        plain_expr(),
        special.clone(),
        (
            prop::collection::vec(plain_expr(), 1..3),
            special,
            any::<prop::sample::Index>()
        )
            .prop_map(|(mut terms, sp, at)| {
                let i = at.index(terms.len() + 1);
                terms.insert(i, sp);
                Constraint::And(terms)
            }),
    ]
    .prop_map(normalize)
}

fn gpu_bind() -> impl Strategy<Value = GpuBind> {
    let mode = prop_oneof![
        Just(GpuBindMode::Closest),
        Just(GpuBindMode::None),
        prop::collection::vec(0u32..8, 1..24).prop_map(GpuBindMode::MapGpu),
        prop::collection::vec(prop_oneof![1u64..16, 1u64..=u64::MAX], 1..12)
            .prop_map(GpuBindMode::MaskGpu),
        (1u32..=u32::MAX).prop_map(GpuBindMode::PerTask),
        (1u32..=u32::MAX).prop_map(GpuBindMode::Single),
    ];
    (any::<bool>(), mode).prop_map(|(verbose, mode)| GpuBind { verbose, mode })
}

fn type_name() -> impl Strategy<Value = String> {
    string_regex("[a-zA-Z0-9][a-zA-Z0-9_.-]{0,8}").unwrap()
}

fn host_names() -> impl Strategy<Value = Vec<String>> {
    let name = prop_oneof![
        string_regex("[a-z][a-z0-9.-]{0,5}[0-9]{0,4}").unwrap(),
        string_regex("(gpu|n|node-)(0|00|1|9|10|99|100|0099)[0-9]?").unwrap(),
        string_regex("[0-9]{1,3}").unwrap(),
    ];
    prop::collection::vec(name, 0..30)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parsers_never_panic_on_any_string(s in any::<String>()) {
        all_parsers(&s)?;
    }

    #[test]
    fn parsers_never_panic_on_syntax_like_strings(s in string_regex(SYNTAX_CHARS).unwrap()) {
        all_parsers(&s)?;
    }

    #[test]
    fn display_never_panics_on_hand_built_values(
        v in prop::collection::vec(any::<u32>(), 0..20),
        m in prop::collection::vec(any::<u64>(), 0..5),
        a in any::<u32>(),
        b in any::<u32>(),
    ) {
        let _ = ArraySpec { indices: v.clone(), max_running: Some(a) }.to_string();
        let _ = NodeRange { min: a, max: b }.to_string();
        let _ = TimeLimit::Minutes(a).to_string();
        let _ = GpuBind { verbose: false, mode: GpuBindMode::MapGpu(v.clone()) }.to_string();
        let _ = GpuBind { verbose: true, mode: GpuBindMode::MaskGpu(m) }.to_string();
        let _ = TasksPerNode(v).to_string();
        let _ = Constraint::And(vec![]).to_string();
        let _ = Constraint::MultipleCounts(vec![]).to_string();
    }

    #[test]
    fn time_limit_round_trips(t in time_limit()) {
        round_trip(&t)?;
    }

    #[test]
    fn duration_format_parses_back_rounded_up(secs in 0u64..100_000_000) {
        let t = TimeLimit::parse(&format_duration_secs(secs)).unwrap();
        prop_assert_eq!(t, TimeLimit::from_minutes(secs.div_ceil(60) as u32));
    }

    #[test]
    fn array_round_trips(
        indices in prop::collection::btree_set(0u32..1001, 1..60),
        max_running in proptest::option::of(1u32..=u32::MAX),
    ) {
        let a = ArraySpec { indices: indices.into_iter().collect(), max_running };
        round_trip(&a)?;
    }

    #[test]
    fn dependency_round_trips(d in dependency()) {
        round_trip(&d)?;
    }

    #[test]
    fn constraint_round_trips(c in constraint()) {
        round_trip(&c)?;
        // Without counts and brackets, a single node matches exactly as the boolean formula.
        let features: Vec<&str> = c.features().into_iter().collect();
        if c.node_counts().is_empty() && c.matching_or_alternatives().is_none() {
            let has = |f: &str| f.len().is_multiple_of(2);
            prop_assert_eq!(c.matches(has), eval_plain(&c, &has));
        }
        if let Some(alts) = c.matching_or_alternatives() {
            for alt in &alts {
                prop_assert!(alt.matching_or_alternatives().is_none());
                // A node matching an alternative matches the whole constraint.
                let set: BTreeSet<&str> = alt.features().into_iter().collect();
                let everything = |f: &str| set.contains(f);
                if alt.matches(everything) {
                    prop_assert!(c.matches(everything));
                }
            }
        }
        prop_assert!(features.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn gpu_bind_round_trips(b in gpu_bind()) {
        round_trip(&b)?;
    }

    #[test]
    fn mem_round_trips(mib in any::<u64>()) {
        round_trip(&MemSize::from_mib(mib))?;
    }

    #[test]
    fn nodes_round_trip(a in 1u32..=u32::MAX, b in 1u32..=u32::MAX) {
        round_trip(&NodeRange { min: a.min(b), max: a.max(b) })?;
    }

    #[test]
    fn switches_round_trip(count in 1u32..=u32::MAX, max_wait in proptest::option::of(time_limit())) {
        round_trip(&Switches { count, max_wait })?;
    }

    #[test]
    fn gpu_count_round_trips(
        gpu_type in proptest::option::of(type_name().prop_filter("gpu is the gres prefix", |t| !t.eq_ignore_ascii_case("gpu"))),
        count in any::<u32>(),
    ) {
        round_trip(&GpuCount { gpu_type, count })?;
    }

    #[test]
    fn gres_round_trips(
        name in string_regex("[a-z][a-z0-9_]{0,6}").unwrap().prop_filter("reserved", |n| n != "gres"),
        gpu_type in proptest::option::of(type_name()),
        count in 0u64..u64::MAX,
    ) {
        let item = GresItem { name, gpu_type, count };
        round_trip(&item)?;
        prop_assert_eq!(parse_gres(&format!("{item},{item}")).unwrap(), vec![item.clone(), item]);
    }

    #[test]
    fn tasks_per_node_round_trips(v in prop::collection::vec(prop_oneof![1u32..4, any::<u32>()], 0..20)) {
        let t = TasksPerNode(v);
        if t.0.is_empty() {
            prop_assert!(TasksPerNode::parse(&t.to_string()).is_err());
        } else {
            round_trip(&t)?;
        }
    }

    #[test]
    fn hostlist_round_trips(names in host_names()) {
        let h = HostList::from_names(names.clone()).unwrap();
        round_trip(&h)?;
        // compress keeps order and duplicates.
        prop_assert_eq!(expand(&compress(&names)).unwrap(), names.clone());
        // compress_sorted: the same set, sorted, no duplicates, and stable.
        let sorted = expand(&compress_sorted(&names)).unwrap();
        let set: BTreeSet<&String> = names.iter().collect();
        prop_assert_eq!(sorted.iter().collect::<BTreeSet<_>>(), set.clone());
        prop_assert_eq!(sorted.len(), set.len());
        prop_assert_eq!(compress_sorted(&sorted), compress_sorted(&names));
    }
}

/// Plain boolean evaluation (no counts, no brackets).
fn eval_plain(c: &Constraint, has: &dyn Fn(&str) -> bool) -> bool {
    match c {
        Constraint::Feature(f) => has(f),
        Constraint::And(v) => v.iter().all(|c| eval_plain(c, has)),
        Constraint::Or(v) => v.iter().any(|c| eval_plain(c, has)),
        other => panic!("not plain: {other:?}"),
    }
}

#[test]
fn huge_inputs_are_refused_quickly() {
    // Refused before any large allocation.
    assert!(expand("a[0-65535]b[0-65535]").is_err());
    assert!(expand(&"a[0-65535],".repeat(20)).is_err());
    assert!(Constraint::parse(&"(".repeat(100_000)).is_err());
    assert!(GpuBind::parse("map_gpu:0*4294967295").is_err());
    let long = "x,".repeat(200_000);
    assert_eq!(expand(&long).unwrap().len(), 200_000);
}
