-- Log lines' second index goes (see the PostgreSQL migration of the same
-- number); SQLite keeps its foreign keys, which cost it little.
DROP INDEX IF EXISTS log_lines_by_attempt;
