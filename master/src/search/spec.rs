//! A sweep's search spec and its expansion into trials, as pure functions.
//!
//! A spec names fixed `params`, a `grid` of values per parameter (every
//! combination is tried), `random` distributions per parameter (`samples`
//! draws for each grid point), and `seeds` per configuration. Expansion is
//! deterministic: the same spec with the same `sweep_seed` gives the same
//! configurations, in the same order, on every machine (ChaCha8, whose
//! stream is fixed by its specification, and arithmetic of our own on its
//! output). Everything wrong with a spec is found here, before anything is
//! stored.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The largest sweep seed: integers up to 2^53 survive any JSON reader.
pub const MAX_SWEEP_SEED: u64 = 1 << 53;

/// Which end of the metric is better.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Max,
    Min,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Max => "max",
            Direction::Min => "min",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "max" => Some(Direction::Max),
            "min" => Some(Direction::Min),
            _ => None,
        }
    }
}

/// Successive halving at progress milestones (see [`super::halving`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyStopping {
    /// Progress (episodes) at which configurations are compared, ascending.
    pub milestones: Vec<u64>,
    /// The fraction of configurations kept at each milestone (the rest are
    /// stopped); 0.5 by default.
    #[serde(default = "default_keep")]
    pub keep: f64,
}

fn default_keep() -> f64 {
    0.5
}

/// A sweep as an operator writes it (JSON through the API; the CLI builds
/// it from flags or a JSON/TOML file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub adapter: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Parameters every trial gets unchanged.
    #[serde(default)]
    pub params: Map<String, Value>,
    /// Values per parameter; every combination is a grid point.
    #[serde(default)]
    pub grid: BTreeMap<String, Value>,
    /// A distribution per parameter: `"uniform:LOW:HIGH"`,
    /// `"log-uniform:LOW:HIGH"`, `"choice:A,B,.."`, or the same as
    /// `{"uniform": [LOW, HIGH]}`, `{"log_uniform": [..]}`, `{"choice": [..]}`.
    #[serde(default)]
    pub random: BTreeMap<String, Value>,
    /// Random draws per grid point; 1 by default, only with `random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u32>,
    /// Trials per configuration, with seeds `seed_from`, `seed_from + 1`, ..
    #[serde(default = "one")]
    pub seeds: u32,
    #[serde(default)]
    pub seed_from: i64,
    /// The parameter that carries a trial's seed.
    #[serde(default = "default_seed_param")]
    pub seed_param: String,
    /// Seeds the random draws; chosen by the master when absent, and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_seed: Option<u64>,
    /// The result metric configurations are ranked by.
    pub metric: String,
    #[serde(default)]
    pub direction: Direction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stopping: Option<EarlyStopping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Each trial's progress timeout, as for a task (checked there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_timeout_secs: Option<i64>,
    /// What each trial needs on one host, as for a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Value>,
}

fn one() -> u32 {
    1
}

fn default_seed_param() -> String {
    "seed".into()
}

/// A random distribution of one parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Distribution {
    Uniform { low: f64, high: f64 },
    LogUniform { low: f64, high: f64 },
    Choice(Vec<Value>),
}

const DISTRIBUTIONS: &str = "uniform:LOW:HIGH, log-uniform:LOW:HIGH (0 < LOW) or choice:A,B,...";

impl Distribution {
    /// Reads `"uniform:0.9:0.999"` or `{"uniform": [0.9, 0.999]}` (and the
    /// same for `log-uniform`/`log_uniform` and `choice`).
    pub fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::String(text) => Self::parse(text),
            Value::Object(map) if map.len() == 1 => {
                let (name, args) = map.iter().next().expect("one entry");
                let Value::Array(args) = args else {
                    return Err(format!("{name} takes a list, got {args}"));
                };
                Self::build(name, args.clone())
            }
            other => Err(format!("expected {DISTRIBUTIONS}, got {other}")),
        }
    }

    /// Reads the text form: `uniform:LOW:HIGH`, `log-uniform:LOW:HIGH`,
    /// `choice:A,B,..` (each choice read as JSON when it is JSON).
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some((name, rest)) = text.split_once(':') else {
            return Err(format!("expected {DISTRIBUTIONS}, got {text:?}"));
        };
        let args: Vec<Value> = if name == "choice" {
            rest.split(',').map(scalar).collect()
        } else {
            rest.split(':')
                .map(|n| {
                    n.trim()
                        .parse::<f64>()
                        .map(Value::from)
                        .map_err(|_| format!("{name}: {n:?} is not a number"))
                })
                .collect::<Result<_, _>>()?
        };
        Self::build(name, args)
    }

    fn build(name: &str, args: Vec<Value>) -> Result<Self, String> {
        let bounds = |args: &[Value]| -> Result<(f64, f64), String> {
            match args {
                [low, high] => match (low.as_f64(), high.as_f64()) {
                    (Some(l), Some(h)) if l.is_finite() && h.is_finite() && l < h => Ok((l, h)),
                    _ => Err(format!(
                        "{name} needs two numbers LOW < HIGH, got {low}, {high}"
                    )),
                },
                _ => Err(format!(
                    "{name} needs LOW and HIGH, got {} values",
                    args.len()
                )),
            }
        };
        match name {
            "uniform" => bounds(&args).map(|(low, high)| Distribution::Uniform { low, high }),
            "log-uniform" | "log_uniform" | "loguniform" => {
                let (low, high) = bounds(&args)?;
                if low <= 0.0 {
                    return Err(format!("{name} needs 0 < LOW, got {low}"));
                }
                Ok(Distribution::LogUniform { low, high })
            }
            "choice" if args.is_empty() => Err("choice needs at least one value".into()),
            "choice" => Ok(Distribution::Choice(args)),
            other => Err(format!(
                "unknown distribution {other:?}; use {DISTRIBUTIONS}"
            )),
        }
    }

    /// One draw, from `u` uniform in [0, 1).
    fn draw(&self, u: f64) -> Value {
        match self {
            Distribution::Uniform { low, high } => Value::from(low + u * (high - low)),
            Distribution::LogUniform { low, high } => {
                Value::from((low.ln() + u * (high.ln() - low.ln())).exp())
            }
            Distribution::Choice(values) => {
                let i = ((u * values.len() as f64) as usize).min(values.len() - 1);
                values[i].clone()
            }
        }
    }
}

/// A command-line value: JSON when it is JSON (`0.3`, `true`, `"a"`), else
/// the text itself.
pub fn scalar(text: &str) -> Value {
    let text = text.trim();
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// One trial: a configuration with a seed, and the params its task gets.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTrial {
    pub config: usize,
    pub seed: i64,
    pub params: Map<String, Value>,
}

/// What a spec expands to.
#[derive(Clone, Debug, PartialEq)]
pub struct Expansion {
    /// The swept values of each configuration, by configuration index.
    pub configs: Vec<Map<String, Value>>,
    /// Seed-major: every configuration's first seed, then every second, so
    /// that a busy cluster starts every configuration early.
    pub trials: Vec<PlannedTrial>,
    /// The sweep seed the draws used.
    pub sweep_seed: u64,
}

/// Expands a spec into its trials, or says what is wrong with it. A spec
/// without a `sweep_seed` must have been given one first
/// ([`SweepSpec::with_seed`]). `max_trials` is the batch limit.
pub fn expand(spec: &SweepSpec, max_trials: usize) -> Result<Expansion, String> {
    check_names(spec)?;
    let grid = grid_axes(&spec.grid)?;
    let random = spec
        .random
        .iter()
        .map(|(k, v)| {
            Distribution::from_value(v)
                .map(|d| (k.clone(), d))
                .map_err(|e| format!("random parameter {k:?}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let samples = match (spec.samples, random.is_empty()) {
        (Some(0), _) => return Err("\"samples\" must be at least 1".into()),
        (Some(n), true) if n > 1 => {
            return Err(format!(
                "\"samples\" ({n}) draws the random parameters, and this sweep has none"
            ))
        }
        (n, _) => n.unwrap_or(1) as usize,
    };
    if spec.seeds == 0 {
        return Err("\"seeds\" must be at least 1".into());
    }
    let points: usize = grid
        .iter()
        .try_fold(1usize, |n, (_, values)| n.checked_mul(values.len()))
        .unwrap_or(usize::MAX);
    let total = points
        .checked_mul(samples)
        .and_then(|n| n.checked_mul(spec.seeds as usize))
        .unwrap_or(usize::MAX);
    if total > max_trials {
        return Err(format!(
            "the sweep expands to {} trials ({points} grid points x {samples} samples x {} seeds); \
             the limit is {max_trials}",
            if total == usize::MAX { "too many".to_string() } else { total.to_string() },
            spec.seeds
        ));
    }
    let sweep_seed = spec.sweep_seed.ok_or("the spec has no sweep seed")?;
    if sweep_seed > MAX_SWEEP_SEED {
        return Err(format!(
            "\"sweep_seed\" must be at most 2^53, got {sweep_seed}"
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(sweep_seed);
    let mut configs = Vec::with_capacity(points * samples);
    for point in 0..points {
        let base = grid_point(&grid, point);
        for _ in 0..samples {
            let mut config = base.clone();
            for (name, distribution) in &random {
                // 53 random bits: every double in [0, 1) on that grid.
                let u = (rng.random::<u64>() >> 11) as f64 / (1u64 << 53) as f64;
                config.insert(name.clone(), distribution.draw(u));
            }
            configs.push(config);
        }
    }
    let trials = trials(spec, &configs)?;
    Ok(Expansion {
        configs,
        trials,
        sweep_seed,
    })
}

impl SweepSpec {
    /// The spec with a sweep seed: its own, or `fresh` when it had none.
    pub fn with_seed(mut self, fresh: u64) -> Self {
        self.sweep_seed.get_or_insert(fresh % (MAX_SWEEP_SEED + 1));
        self
    }
}

/// No parameter is set twice, and names and metric are sensible.
fn check_names(spec: &SweepSpec) -> Result<(), String> {
    if spec.metric.trim().is_empty() || spec.metric.len() > 64 {
        return Err("\"metric\" must name a result metric (at most 64 bytes)".into());
    }
    if spec.seed_param.is_empty() {
        return Err("\"seed_param\" must name a parameter".into());
    }
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    let sources = [
        ("params", spec.params.keys().collect::<Vec<_>>()),
        ("grid", spec.grid.keys().collect()),
        ("random", spec.random.keys().collect()),
    ];
    for (source, keys) in &sources {
        for key in keys {
            if key.as_str() == spec.seed_param {
                return Err(format!(
                    "{key:?} is set by the sweep's seeds (\"seed_param\"); remove it from {source}"
                ));
            }
            if let Some(first) = seen.insert(key.as_str(), *source) {
                return Err(format!("parameter {key:?} is in both {first} and {source}"));
            }
        }
    }
    if let Some(es) = &spec.early_stopping {
        super::halving::check(es)?;
    }
    Ok(())
}

/// The grid's parameters with their values, each list non-empty.
fn grid_axes(grid: &BTreeMap<String, Value>) -> Result<Vec<(String, Vec<Value>)>, String> {
    grid.iter()
        .map(|(name, values)| match values {
            Value::Array(v) if v.is_empty() => Err(format!("the grid of {name:?} is empty")),
            Value::Array(v) => Ok((name.clone(), v.clone())),
            other => Err(format!(
                "the grid of {name:?} must be a list of values, got {other}"
            )),
        })
        .collect()
}

/// The `index`th combination of the grid, the last parameter varying fastest.
fn grid_point(grid: &[(String, Vec<Value>)], mut index: usize) -> Map<String, Value> {
    let mut point = Map::new();
    for (name, values) in grid.iter().rev() {
        point.insert(name.clone(), values[index % values.len()].clone());
        index /= values.len();
    }
    point
}

fn trials(spec: &SweepSpec, configs: &[Map<String, Value>]) -> Result<Vec<PlannedTrial>, String> {
    let mut trials = Vec::with_capacity(configs.len() * spec.seeds as usize);
    for s in 0..i64::from(spec.seeds) {
        let seed = spec
            .seed_from
            .checked_add(s)
            .ok_or("\"seed_from\" + \"seeds\" overflows")?;
        for (config, values) in configs.iter().enumerate() {
            let mut params = spec.params.clone();
            params.extend(values.clone());
            params.insert(spec.seed_param.clone(), Value::from(seed));
            trials.push(PlannedTrial {
                config,
                seed,
                params,
            });
        }
    }
    Ok(trials)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> SweepSpec {
        serde_json::from_value(v).expect("a spec")
    }

    fn expand_ok(v: Value) -> Expansion {
        expand(&spec(v).with_seed(7), 10_000).expect("expands")
    }

    fn expand_err(v: Value) -> String {
        expand(&spec(v).with_seed(7), 100).expect_err("refused")
    }

    #[test]
    fn a_grid_expands_to_every_combination_times_seeds_seed_major() {
        let e = expand_ok(json!({
            "adapter": "a", "metric": "m", "seeds": 2, "seed_from": 10,
            "params": {"episodes": 50},
            "grid": {"alpha": [0.1, 0.3], "gamma": [0.9, 0.99]}
        }));
        assert_eq!(e.configs.len(), 4);
        assert_eq!(
            e.configs[1],
            *json!({"alpha": 0.1, "gamma": 0.99}).as_object().unwrap()
        );
        assert_eq!(e.trials.len(), 8);
        let order: Vec<(usize, i64)> = e.trials.iter().map(|t| (t.config, t.seed)).collect();
        assert_eq!(
            order,
            [
                (0, 10),
                (1, 10),
                (2, 10),
                (3, 10),
                (0, 11),
                (1, 11),
                (2, 11),
                (3, 11)
            ]
        );
        assert_eq!(
            Value::Object(e.trials[5].params.clone()),
            json!({"episodes": 50, "alpha": 0.1, "gamma": 0.99, "seed": 11})
        );
    }

    #[test]
    fn random_search_is_reproducible_from_its_sweep_seed() {
        let v = json!({
            "adapter": "a", "metric": "m", "samples": 8,
            "grid": {"alpha": [0.1, 0.3]},
            "random": {"gamma": "uniform:0.9:0.999", "lr": {"log_uniform": [1e-4, 1e-1]},
                       "eps": "choice:0.1,0.2,greedy"}
        });
        let a = expand_ok(v.clone());
        let b = expand_ok(v.clone());
        assert_eq!(a, b);
        assert_eq!(a.configs.len(), 16);
        let other = expand(&spec(v).with_seed(8), 10_000).unwrap();
        assert_ne!(a.configs, other.configs);
        for c in &a.configs {
            let g = c["gamma"].as_f64().unwrap();
            let lr = c["lr"].as_f64().unwrap();
            assert!((0.9..0.999).contains(&g), "{g}");
            assert!((1e-4..1e-1).contains(&lr), "{lr}");
            assert!([json!(0.1), json!(0.2), json!("greedy")].contains(&c["eps"]));
        }
        // Each grid point gets its own draws.
        assert_eq!(a.configs[0]["alpha"], json!(0.1));
        assert_eq!(a.configs[8]["alpha"], json!(0.3));
    }

    #[test]
    fn the_draws_of_a_seed_never_change() {
        // Pinned values: a change to the generator or to the arithmetic
        // would silently make old sweeps unreproducible.
        let e = expand_ok(json!({"adapter": "a", "metric": "m", "samples": 2,
                                 "random": {"x": "uniform:0:1"}}));
        let xs: Vec<String> = e
            .configs
            .iter()
            .map(|c| format!("{:.6}", c["x"].as_f64().unwrap()))
            .collect();
        assert_eq!(xs, PINNED_DRAWS);
    }

    const PINNED_DRAWS: [&str; 2] = ["0.157796", "0.167989"];

    #[test]
    fn log_uniform_spreads_over_orders_of_magnitude() {
        let e = expand_ok(json!({"adapter": "a", "metric": "m", "samples": 200,
                                 "random": {"lr": "log-uniform:0.0001:1"}}));
        let small = e
            .configs
            .iter()
            .filter(|c| c["lr"].as_f64().unwrap() < 0.01)
            .count();
        // Half the mass lies below 0.01; a uniform draw would put 1% there.
        assert!((60..140).contains(&small), "{small}");
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let base = |extra: Value| {
            let mut v = json!({"adapter": "a", "metric": "m"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            expand_err(v)
        };
        assert!(base(json!({"random": {"g": "normal:0:1"}}))
            .contains("unknown distribution \"normal\""));
        assert!(base(json!({"grid": {"alpha": []}})).contains("the grid of \"alpha\" is empty"));
        assert!(base(json!({"grid": {"alpha": 0.1}})).contains("must be a list"));
        assert!(base(json!({"grid": {"a": [1, 2, 3, 4, 5]}, "seeds": 30})).contains("150 trials"));
        assert!(base(json!({"random": {"g": "uniform:1:0"}})).contains("LOW < HIGH"));
        assert!(base(json!({"random": {"g": "log-uniform:0:1"}})).contains("0 < LOW"));
        assert!(base(json!({"samples": 4})).contains("has none"));
        assert!(base(json!({"seeds": 0})).contains("\"seeds\""));
        assert!(base(json!({"grid": {"seed": [1, 2]}})).contains("seed_param"));
        assert!(
            base(json!({"params": {"a": 1}, "grid": {"a": [1]}})).contains("both params and grid")
        );
        assert!(expand_err(json!({"adapter": "a", "metric": ""})).contains("metric"));
        assert!(serde_json::from_value::<SweepSpec>(
            json!({"adapter": "a", "metric": "m", "grdi": {}})
        )
        .unwrap_err()
        .to_string()
        .contains("unknown field `grdi`"));
    }

    #[test]
    fn text_distributions_read_numbers_and_choices() {
        assert_eq!(
            Distribution::parse("uniform:0.9:0.999"),
            Ok(Distribution::Uniform {
                low: 0.9,
                high: 0.999
            })
        );
        assert_eq!(
            Distribution::parse("choice:1,true,x"),
            Ok(Distribution::Choice(vec![
                json!(1),
                json!(true),
                json!("x")
            ]))
        );
        assert!(Distribution::parse("uniform:a:1")
            .unwrap_err()
            .contains("not a number"));
        assert!(Distribution::parse("uniform")
            .unwrap_err()
            .contains("expected"));
    }
}
