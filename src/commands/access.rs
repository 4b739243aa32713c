//! `trainyard team …`, `trainyard token …`, `trainyard audit` and
//! `trainyard whoami`: who may do what on the cluster (see docs/teams.md).
//! Teams and tokens are an admin's to manage; a token is printed once, when
//! issued, and only its digest is kept.

use super::format::{or_dash, timestamp};
use super::table::plain;
use crate::client::{ApiClient, AuditEntryView, TokenRequest, TokenView};

#[derive(Debug, Clone, clap::Args)]
pub struct TeamArgs {
    #[command(subcommand)]
    pub action: TeamAction,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TeamAction {
    /// Create a team (lower-case letters, digits, '-' and '_')
    Create {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// List the teams
    List {
        /// Print JSON instead of a list
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TokenAction {
    /// Issue a token; it is printed this once
    Create {
        /// Who or what holds it (alice, ci-red): the audit log's name for it
        #[arg(long)]
        name: String,
        /// admin or operator (every team), member or viewer (one team)
        #[arg(long)]
        role: String,
        /// The team of a member or viewer
        #[arg(long)]
        team: Option<String>,
        /// How long it is valid: 30d, 12h, ... or never [default: 90d]
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
        /// Print the answer as JSON
        #[arg(long)]
        json: bool,
    },
    /// List issued tokens (never the tokens themselves)
    List {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: refused from the next request on
    Revoke {
        #[arg(value_name = "ID")]
        id: i64,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// Most entries to print
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Only entries older than this id (the next page: the last id printed)
    #[arg(long, value_name = "ID")]
    pub before: Option<i64>,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

pub async fn team(client: &ApiClient, args: TeamArgs) -> anyhow::Result<()> {
    match args.action {
        TeamAction::Create { name } => {
            client.create_team(&name).await?;
            println!("team {name} created");
        }
        TeamAction::List { json } => {
            let teams = client.teams().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&teams)?);
            } else {
                for t in teams["teams"].as_array().into_iter().flatten() {
                    println!("{}", t["name"].as_str().unwrap_or("?"));
                }
            }
        }
    }
    Ok(())
}

pub async fn token(client: &ApiClient, args: TokenArgs) -> anyhow::Result<()> {
    match args.action {
        TokenAction::Create {
            name,
            role,
            team,
            expires_in,
            json,
        } => {
            let req = TokenRequest {
                name: &name,
                role: &role,
                team: team.as_deref(),
                expires_in: expires_in.as_deref(),
            };
            let issued = client.create_token(&req).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&issued)?);
            } else {
                println!("{}", issued.token.as_deref().unwrap_or(""));
                eprintln!(
                    "token {} ({}, {}{}) issued, expires {}; it is shown this once",
                    issued.id,
                    issued.name,
                    issued.role,
                    issued.team.map(|t| format!(" of {t}")).unwrap_or_default(),
                    issued.expires_at_ms.map_or("never".into(), timestamp)
                );
            }
        }
        TokenAction::List { json } => {
            let tokens = client.tokens().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tokens)?);
            } else {
                println!("{}", tokens_table(&tokens));
            }
        }
        TokenAction::Revoke { id } => {
            let revoked = client.revoke_token(id).await?;
            println!("token {id} ({}) revoked", revoked.name);
        }
    }
    Ok(())
}

/// ID, NAME, ROLE, TEAM, EXPIRES, REVOKED.
pub fn tokens_table(tokens: &[TokenView]) -> String {
    let rows = tokens
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                t.name.clone(),
                t.role.clone(),
                or_dash(t.team.as_deref()),
                t.expires_at_ms.map_or("never".into(), timestamp),
                or_dash(t.revoked_at_ms.map(timestamp)),
            ]
        })
        .collect();
    plain(
        &["ID", "NAME", "ROLE", "TEAM", "EXPIRES", "REVOKED"],
        &[0],
        rows,
    )
}

pub async fn audit(client: &ApiClient, args: AuditArgs) -> anyhow::Result<()> {
    let entries = client.audit(Some(args.limit), args.before).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        println!("{}", audit_table(&entries));
    }
    Ok(())
}

/// ID, AT, WHO (name, role, team), ACTION, TARGET, FROM.
pub fn audit_table(entries: &[AuditEntryView]) -> String {
    let rows = entries
        .iter()
        .map(|e| {
            let who = match &e.team {
                Some(team) => format!("{} ({} of {team})", e.principal, e.role),
                None => format!("{} ({})", e.principal, e.role),
            };
            vec![
                e.id.to_string(),
                timestamp(e.at_ms),
                who,
                e.action.clone(),
                e.target.clone(),
                e.source.clone(),
            ]
        })
        .collect();
    plain(&["ID", "AT", "WHO", "ACTION", "TARGET", "FROM"], &[0], rows)
}

pub async fn whoami(client: &ApiClient) -> anyhow::Result<()> {
    let me = client.whoami().await?;
    let name = me["name"].as_str().unwrap_or("?");
    let role = me["role"].as_str().unwrap_or("?");
    match me["team"].as_str() {
        Some(team) => println!("{name}: {role} of team {team}"),
        None => println!("{name}: {role} (every team)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_table_says_who_did_what_to_what_from_where() {
        let entry = AuditEntryView {
            id: 3,
            at_ms: 0,
            principal: "ci".into(),
            token_id: Some(2),
            role: "member".into(),
            team: Some("red".into()),
            action: "task.cancel".into(),
            target: "task 9".into(),
            detail: None,
            source: "127.0.0.1:4000".into(),
        };
        let table = audit_table(&[entry]);
        let row = table.lines().nth(1).unwrap();
        for part in [
            "3",
            "1970-01-01T00:00:00Z",
            "ci (member of red)",
            "task.cancel",
            "task 9",
            "127.0.0.1:4000",
        ] {
            assert!(row.contains(part), "{part:?} in {row:?}");
        }
    }
}
