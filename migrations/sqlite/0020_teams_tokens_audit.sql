-- Who may do what (issue #41). Kept equivalent to
-- migrations/postgres/0020_teams_tokens_audit.sql.
--
-- Every task and sweep belongs to a team; those stored before teams existed
-- belong to `default`, as does the work of the cluster's own API token.

CREATE TABLE teams (
    name          TEXT    PRIMARY KEY,
    created_at_ms INTEGER NOT NULL
);
INSERT INTO teams (name, created_at_ms) VALUES ('default', 0);

-- Never updated after insert (no index here slows a transition).
ALTER TABLE tasks ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
ALTER TABLE sweeps ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
-- A team's listing, newest first.
CREATE INDEX tasks_by_team ON tasks (team, id);
CREATE INDEX sweeps_by_team ON sweeps (team, id);

-- One row per issued API token. Only the SHA-256 of the token is kept: the
-- token itself is shown once, when issued. Fleet-wide roles belong to no
-- team, team roles to exactly one.
CREATE TABLE api_tokens (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL,
    role          TEXT    NOT NULL CHECK (role IN ('admin', 'operator', 'member', 'viewer')),
    team          TEXT    REFERENCES teams (name),
    token_sha256  TEXT    NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL,
    created_by    TEXT    NOT NULL,
    expires_at_ms INTEGER,
    revoked_at_ms INTEGER,
    CHECK ((role IN ('admin', 'operator') AND team IS NULL)
        OR (role IN ('member', 'viewer') AND team IS NOT NULL))
);

-- Every change made through the API: who, when, what, from where. The API
-- only ever appends to it.
CREATE TABLE audit_log (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms     INTEGER NOT NULL,
    -- The token's name (or `api.token`), its id, role and team.
    principal TEXT    NOT NULL,
    token_id  INTEGER,
    role      TEXT    NOT NULL,
    team      TEXT,
    -- `task.submit`, `task.cancel`, `sweep.create`, `host.drain`, ...
    action    TEXT    NOT NULL,
    -- What it acted on: `task 12`, `host h1`, `token 3`, `team red`.
    target    TEXT    NOT NULL,
    -- More about the change (JSON), when there is more.
    detail    TEXT,
    -- The client's address as the master saw it.
    source    TEXT    NOT NULL
);
