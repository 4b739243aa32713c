//! `trainyard health`: the master's health report in a few lines (its
//! status, the database, Redis) and, with several masters sharing one
//! database, which of them leads and since when. `trainyard hosts` shows
//! the same leadership line ([`leadership_line`]).

use crate::client::ApiClient;
use serde_json::Value;

#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// Print the master's report as JSON
    #[arg(long)]
    pub json: bool,
}

/// Who leads, in one line, from a health report's `leadership` object:
/// `leader: m1 at http://10.0.0.1:7701 (term 4) since 2024-05-01T12:00:00Z`,
/// or `this master is a standby; leader: …` (or `; no master leads`).
/// Nothing for a single master (SQLite, no election) or a report without
/// the object (an older master).
pub fn leadership_line(health: &Value) -> Option<String> {
    let leadership = health.get("leadership").filter(|l| l.is_object())?;
    let leader = describe_leader(&leadership["leader"], &leadership["term"]);
    match leadership["role"].as_str()? {
        "leader" => Some(leader.unwrap_or_else(|| "leader: this master".into())),
        "standby" => Some(format!(
            "this master is a standby; {}",
            leader.unwrap_or_else(|| "no master leads".into())
        )),
        _ => None,
    }
}

/// `leader: <id> at <api_url> (term N) since <time>`, leaving out what the
/// report does not give; `None` when it names no leader.
fn describe_leader(leader: &Value, term: &Value) -> Option<String> {
    let id = leader.get("id")?.as_str()?;
    let mut line = format!("leader: {id}");
    if let Some(url) = leader.get("api_url").and_then(Value::as_str) {
        line.push_str(&format!(" at {url}"));
    }
    if let Some(term) = term.as_i64() {
        line.push_str(&format!(" (term {term})"));
    }
    if let Some(since) = leader.get("since").and_then(Value::as_str) {
        line.push_str(&format!(" since {since}"));
    }
    Some(line)
}

/// The report's first lines: the overall status and what it depends on.
pub fn status_line(health: &Value) -> String {
    let text = |key: &str| health[key].as_str().unwrap_or("?").to_string();
    format!(
        "{} (database: {}, redis: {})",
        text("status"),
        text("database"),
        text("redis")
    )
}

pub async fn run(client: &ApiClient, args: HealthArgs) -> anyhow::Result<()> {
    let health = client.health().await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&health)?);
        return Ok(());
    }
    println!("{}: {}", client.base_url(), status_line(&health));
    if let Some(line) = leadership_line(&health) {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(role: &str, term: Value, leader: Value) -> Value {
        json!({"status": "ok", "leadership": {"role": role, "term": term, "leader": leader}})
    }

    fn m1() -> Value {
        json!({"id": "m1", "hosts_addr": "10.0.0.1:7700", "api_url": "http://10.0.0.1:7701",
               "since": "2024-05-01T12:00:00Z"})
    }

    #[test]
    fn the_leader_says_who_it_is_its_term_and_since_when() {
        assert_eq!(
            leadership_line(&report("leader", json!(4), m1())).as_deref(),
            Some("leader: m1 at http://10.0.0.1:7701 (term 4) since 2024-05-01T12:00:00Z")
        );
    }

    #[test]
    fn a_standby_says_so_and_names_the_leader_or_its_absence() {
        assert_eq!(
            leadership_line(&report("standby", json!(4), m1())).as_deref(),
            Some(
                "this master is a standby; leader: m1 at http://10.0.0.1:7701 (term 4) \
                 since 2024-05-01T12:00:00Z"
            )
        );
        assert_eq!(
            leadership_line(&report("standby", Value::Null, Value::Null)).as_deref(),
            Some("this master is a standby; no master leads")
        );
    }

    #[test]
    fn a_single_master_or_an_older_one_shows_no_line() {
        assert_eq!(
            leadership_line(&report("single", Value::Null, Value::Null)),
            None
        );
        assert_eq!(leadership_line(&json!({"status": "ok"})), None);
        assert_eq!(leadership_line(&json!({"leadership": null})), None);
    }

    #[test]
    fn the_status_line_names_the_database_and_redis() {
        let health = json!({"status": "degraded", "database": "ok", "redis": "unreachable"});
        assert_eq!(
            status_line(&health),
            "degraded (database: ok, redis: unreachable)"
        );
    }
}
