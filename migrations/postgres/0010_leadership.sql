-- Standby masters: which master leads, and its term. Only the master
-- holding the leadership advisory lock writes this row; it raises the term
-- when it takes the lock, and every write a leader makes checks the term
-- first (`SELECT term ... FOR SHARE`), so a deposed leader changes nothing.
-- SQLite has no such row: it runs one master, under a file lock.
CREATE TABLE leadership (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    term BIGINT NOT NULL,
    holder TEXT,
    hosts_addr TEXT,
    api_url TEXT,
    since_ms BIGINT
);
INSERT INTO leadership (id, term) VALUES (1, 0);
