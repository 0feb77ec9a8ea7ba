"""Numbered schema migrations for the log database, and the code that applies them.

The schema version lives in `PRAGMA user_version` (an integer in the database header,
written inside the same transaction as the schema change, so a migration is all or
nothing). To change the schema, append a `Migration` with the next number to
`MIGRATIONS`; never edit one that has shipped, because databases in the wild have
already applied it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import LogStoreError


class Migration(NamedTuple):
    """One schema step: applied once, in order, when a database is opened."""

    number: int
    description: str
    sql: str


MIGRATIONS: list[Migration] = [
    Migration(
        1,
        "executions table",
        """
        CREATE TABLE executions (
            id                    TEXT PRIMARY KEY,         -- ULID, sorts by creation time
            started_at            TEXT NOT NULL,            -- ISO 8601, UTC, fixed width
            source                TEXT NOT NULL DEFAULT 'api',  -- cli, api, demo, agent, function
            backend               TEXT NOT NULL,
            status                TEXT NOT NULL,
            exit_code             INTEGER,
            duration_ms           INTEGER NOT NULL DEFAULT 0,
            code                  TEXT NOT NULL,
            limits_json           TEXT NOT NULL,            -- limits applied (result.limits)
            request_limits_json   TEXT NOT NULL,            -- limits asked for (request.limits)
            packages_json         TEXT NOT NULL DEFAULT '[]',   -- requirements asked for
            package_versions_json TEXT NOT NULL DEFAULT '{}',   -- name -> version that ran
            stdout                TEXT NOT NULL DEFAULT '',
            stderr                TEXT NOT NULL DEFAULT '',
            stdout_truncated      INTEGER NOT NULL DEFAULT 0,
            stderr_truncated      INTEGER NOT NULL DEFAULT 0,
            error_type            TEXT,                     -- NULL when there was no error
            error_message         TEXT,
            error_traceback       TEXT,
            return_value_json     TEXT NOT NULL DEFAULT 'null',
            cpu_ms                INTEGER NOT NULL DEFAULT 0,
            max_rss_kb            INTEGER NOT NULL DEFAULT 0,
            meta_json             TEXT NOT NULL DEFAULT '{}',
            request_json          TEXT,                     -- the whole ExecutionRequest
            result_json           TEXT                      -- the whole ExecutionResult
        );
        CREATE INDEX executions_status ON executions (status);
        CREATE INDEX executions_backend ON executions (backend);
        CREATE INDEX executions_started_at ON executions (started_at);
        CREATE INDEX executions_source ON executions (source);
        """,
    ),
    Migration(
        2,
        "function_versions table",
        """
        CREATE TABLE function_versions (
            id            INTEGER PRIMARY KEY AUTOINCREMENT,  -- order of the changes
            changed_at    TEXT NOT NULL,            -- ISO 8601, UTC, fixed width
            set_name      TEXT NOT NULL,            -- the FunctionSet's name
            function      TEXT NOT NULL,
            version       INTEGER NOT NULL,         -- after the change (the removed one for remove)
            action        TEXT NOT NULL,            -- add, replace, remove
            author_kind   TEXT NOT NULL,            -- person, optimizer
            author        TEXT NOT NULL,            -- a person's name, or an optimizer run id
            note          TEXT NOT NULL DEFAULT '',
            spec_json     TEXT,                     -- the whole spec after the change; NULL for remove
            code_diff     TEXT NOT NULL DEFAULT ''  -- unified diff of the code, before -> after
        );
        CREATE INDEX function_versions_function ON function_versions (set_name, function, version);
        CREATE INDEX function_versions_changed_at ON function_versions (changed_at);
        """,
    ),
    Migration(
        3,
        "agent_runs and agent_turns tables",
        """
        CREATE TABLE agent_runs (
            id                TEXT PRIMARY KEY,         -- ULID, sorts by creation time
            started_at        TEXT NOT NULL,            -- ISO 8601, UTC, fixed width
            finished_at       TEXT,                     -- NULL while running (or if it died)
            task              TEXT NOT NULL,
            protocol          TEXT NOT NULL,            -- tools, json, text, code
            model             TEXT,
            base_url          TEXT,
            backend           TEXT,
            function_set      TEXT,                     -- the FunctionSet's name
            status            TEXT NOT NULL,            -- running, answered, gave_up, max_turns, budget, llm_error
            final_answer      TEXT,
            stop_reason       TEXT,
            error_json        TEXT NOT NULL DEFAULT 'null',  -- the LLM error that ended it
            turn_count        INTEGER NOT NULL DEFAULT 0,
            prompt_tokens     INTEGER,
            completion_tokens INTEGER,
            sandbox_ms        INTEGER NOT NULL DEFAULT 0,    -- sandbox time used (the budget's unit)
            settings_json     TEXT NOT NULL DEFAULT '{}',    -- limits: max turns, budget, ...
            run_json          TEXT NOT NULL DEFAULT '{}'     -- functions, system prompt, tools sent
        );
        CREATE INDEX agent_runs_started_at ON agent_runs (started_at);
        CREATE INDEX agent_runs_status ON agent_runs (status);
        CREATE TABLE agent_turns (
            run_id                 TEXT NOT NULL REFERENCES agent_runs (id),
            number                 INTEGER NOT NULL,         -- 1, 2, ...
            started_at             TEXT NOT NULL,
            latency_ms             INTEGER NOT NULL DEFAULT 0,
            retries                INTEGER NOT NULL DEFAULT 0,
            prompt_tokens          INTEGER,
            completion_tokens      INTEGER,
            messages_sent_json     TEXT NOT NULL,            -- exactly the messages of the request
            reply_json             TEXT NOT NULL DEFAULT 'null',  -- the assistant message received
            response_json          TEXT NOT NULL DEFAULT 'null',  -- the whole response body
            actions_json           TEXT NOT NULL DEFAULT '[]',    -- as parsed
            feedback_json          TEXT NOT NULL DEFAULT '[]',    -- problems: code, message, details, reminder
            feedback_text          TEXT,                     -- exactly the text sent next
            feedback_messages_json TEXT NOT NULL DEFAULT '[]',
            notes_json             TEXT NOT NULL DEFAULT '[]',
            execution_ids_json     TEXT NOT NULL DEFAULT '[]',    -- executions this turn caused, in order
            error_json             TEXT NOT NULL DEFAULT 'null',
            PRIMARY KEY (run_id, number)
        );
        """,
    ),
    Migration(
        4,
        "code and output stored once; foreign keys from executions to agent runs, turns and "
        "replayed executions; full-text search",
        # Both tables are rebuilt: SQLite cannot add a table-level foreign key to an existing
        # table, and the search index needs row numbers that VACUUM keeps (an INTEGER
        # PRIMARY KEY; the implicit rowid of a table keyed by text may be renumbered).
        # agent_turns first: executions_v4 refers to it, and dropping a table that live
        # rows refer to would fail.
        """
        CREATE TABLE agent_turns_v4 (
            seq                    INTEGER PRIMARY KEY,      -- stable row number (search index)
            run_id                 TEXT NOT NULL REFERENCES agent_runs (id),
            number                 INTEGER NOT NULL,         -- 1, 2, ...
            started_at             TEXT NOT NULL,
            latency_ms             INTEGER NOT NULL DEFAULT 0,
            retries                INTEGER NOT NULL DEFAULT 0,
            prompt_tokens          INTEGER,
            completion_tokens      INTEGER,
            messages_sent_json     TEXT NOT NULL,            -- exactly the messages of the request
            reply_json             TEXT NOT NULL DEFAULT 'null',  -- the assistant message received
            response_json          TEXT NOT NULL DEFAULT 'null',  -- the whole response body
            actions_json           TEXT NOT NULL DEFAULT '[]',    -- as parsed
            feedback_json          TEXT NOT NULL DEFAULT '[]',    -- problems: code, message, details, reminder
            feedback_text          TEXT,                     -- exactly the text sent next
            feedback_messages_json TEXT NOT NULL DEFAULT '[]',
            notes_json             TEXT NOT NULL DEFAULT '[]',
            execution_ids_json     TEXT NOT NULL DEFAULT '[]',    -- executions this turn caused, in order
            error_json             TEXT NOT NULL DEFAULT 'null',
            UNIQUE (run_id, number)
        );
        INSERT INTO agent_turns_v4 (
            run_id, number, started_at, latency_ms, retries, prompt_tokens, completion_tokens,
            messages_sent_json, reply_json, response_json, actions_json, feedback_json,
            feedback_text, feedback_messages_json, notes_json, execution_ids_json, error_json)
        SELECT run_id, number, started_at, latency_ms, retries, prompt_tokens, completion_tokens,
               messages_sent_json, reply_json, response_json, actions_json, feedback_json,
               feedback_text, feedback_messages_json, notes_json, execution_ids_json, error_json
        FROM agent_turns ORDER BY started_at, run_id, number;
        DROP TABLE agent_turns;
        ALTER TABLE agent_turns_v4 RENAME TO agent_turns;

        CREATE TABLE executions_v4 (
            seq                   INTEGER PRIMARY KEY,      -- stable row number (search index)
            id                    TEXT NOT NULL UNIQUE,     -- ULID, sorts by creation time
            started_at            TEXT NOT NULL,            -- ISO 8601, UTC, fixed width
            source                TEXT NOT NULL DEFAULT 'api',  -- cli, api, demo, agent, replay, ...
            backend               TEXT NOT NULL,
            status                TEXT NOT NULL,
            exit_code             INTEGER,
            duration_ms           INTEGER NOT NULL DEFAULT 0,
            function              TEXT,                     -- the function called; NULL for a code block
            code                  TEXT NOT NULL,
            limits_json           TEXT NOT NULL,            -- limits applied (result.limits)
            request_limits_json   TEXT NOT NULL,            -- limits asked for (request.limits)
            packages_json         TEXT NOT NULL DEFAULT '[]',   -- requirements asked for
            package_versions_json TEXT NOT NULL DEFAULT '{}',   -- name -> version that ran
            image                 TEXT,                     -- the Docker image id; NULL elsewhere
            stdout                TEXT NOT NULL DEFAULT '',
            stderr                TEXT NOT NULL DEFAULT '',
            stdout_truncated      INTEGER NOT NULL DEFAULT 0,
            stderr_truncated      INTEGER NOT NULL DEFAULT 0,
            error_type            TEXT,                     -- NULL when there was no error
            error_message         TEXT,
            error_traceback       TEXT,
            return_value_json     TEXT NOT NULL DEFAULT 'null',
            cpu_ms                INTEGER NOT NULL DEFAULT 0,
            max_rss_kb            INTEGER NOT NULL DEFAULT 0,
            meta_json             TEXT NOT NULL DEFAULT '{}',
            -- The fields of the request and the result that have no column of their own
            -- (a function call's arguments, the preamble, an error's structured detail, ...):
            -- every field is stored once, in a column or here.
            request_extra_json    TEXT NOT NULL DEFAULT '{}',
            result_extra_json     TEXT NOT NULL DEFAULT '{}',
            -- Links any SQLite tool can follow. The turn is filled in when the turn is
            -- logged (after the executions it caused). Evaluations link here in their own
            -- migration (an evaluation_id column).
            agent_run_id          TEXT REFERENCES agent_runs (id),
            agent_turn            INTEGER,
            replay_of             TEXT REFERENCES executions (id) ON DELETE SET NULL,
            FOREIGN KEY (agent_run_id, agent_turn) REFERENCES agent_turns (run_id, number)
        );
        INSERT INTO executions_v4 (
            id, started_at, source, backend, status, exit_code, duration_ms, function, code,
            limits_json, request_limits_json, packages_json, package_versions_json, image,
            stdout, stderr, stdout_truncated, stderr_truncated, error_type, error_message,
            error_traceback, return_value_json, cpu_ms, max_rss_kb, meta_json,
            request_extra_json, result_extra_json, agent_run_id, agent_turn)
        SELECT e.id, e.started_at, e.source, e.backend, e.status, e.exit_code, e.duration_ms,
               json_extract(e.request_json, '$.call.name'), e.code,
               e.limits_json, e.request_limits_json, e.packages_json, e.package_versions_json,
               json_extract(e.result_json, '$.image'),
               e.stdout, e.stderr, e.stdout_truncated, e.stderr_truncated, e.error_type,
               e.error_message, e.error_traceback, e.return_value_json, e.cpu_ms, e.max_rss_kb,
               e.meta_json,
               coalesce(json_remove(e.request_json, '$.code', '$.limits', '$.packages'), '{}'),
               coalesce(json_remove(e.result_json, '$.id', '$.backend', '$.status',
                                    '$.exit_code', '$.stdout', '$.stderr', '$.stdout_truncated',
                                    '$.stderr_truncated', '$.error.type', '$.error.message',
                                    '$.error.traceback', '$.return_value', '$.duration_ms',
                                    '$.limits', '$.resources', '$.packages', '$.image',
                                    '$.started_at'), '{}'),
               (SELECT r.id FROM agent_runs r WHERE r.id = json_extract(e.meta_json, '$.agent_run')),
               (SELECT t.number FROM agent_turns t
                 WHERE t.run_id = json_extract(e.meta_json, '$.agent_run')
                   AND t.number = json_extract(e.meta_json, '$.agent_turn'))
        FROM executions e ORDER BY e.started_at, e.id;
        DROP TABLE executions;
        ALTER TABLE executions_v4 RENAME TO executions;

        -- Few indexes: each one is written with every execution. Backends and sources
        -- have a handful of values each; lists filtered by them walk the time index, and
        -- the values themselves (for a form's choices) are in execution_facets.
        CREATE INDEX executions_started_at ON executions (started_at, id);
        CREATE INDEX executions_status ON executions (status, started_at);
        CREATE INDEX executions_function ON executions (function) WHERE function IS NOT NULL;
        CREATE INDEX executions_agent ON executions (agent_run_id, agent_turn)
            WHERE agent_run_id IS NOT NULL;
        CREATE INDEX executions_replay_of ON executions (replay_of) WHERE replay_of IS NOT NULL;

        -- Full-text search over what ran and what it printed, without a second copy of
        -- the text: the index reads the executions table itself (external content).
        -- Rows are indexed in batches by the writer (runner.logs.store: every few dozen
        -- rows, and when a store closes), because indexing one row per transaction
        -- doubles the cost of logging an execution; `indexed_up_to` is the last row in
        -- the index, and searches match the few rows after it on the fly. Deletes and
        -- updates of indexed rows are kept in step here, by triggers.
        -- columnsize=0: no per-row table of token counts (only ranking by relevance needs
        -- it; lists here are in time order), one write less per row.
        CREATE VIRTUAL TABLE executions_fts USING fts5 (
            code, stdout, stderr, error_type, error_message, error_traceback,
            content = 'executions', content_rowid = 'seq', columnsize = 0
        );
        CREATE TABLE executions_fts_state (
            id            INTEGER PRIMARY KEY CHECK (id = 1),
            indexed_up_to INTEGER NOT NULL          -- every row with seq <= this is indexed
        );
        CREATE TRIGGER executions_fts_delete AFTER DELETE ON executions BEGIN
            INSERT INTO executions_fts (executions_fts, rowid, code, stdout, stderr, error_type,
                                        error_message, error_traceback)
            SELECT 'delete', old.seq, old.code, old.stdout, old.stderr, old.error_type,
                   old.error_message, old.error_traceback
            WHERE old.seq <= (SELECT indexed_up_to FROM executions_fts_state);
            -- A new row takes the number after the largest one left: keep the mark below it,
            -- so that the new row counts as not indexed yet.
            UPDATE executions_fts_state
            SET indexed_up_to = (SELECT coalesce(max(seq), 0) FROM executions)
            WHERE indexed_up_to > (SELECT coalesce(max(seq), 0) FROM executions);
        END;
        CREATE TRIGGER executions_fts_update
        AFTER UPDATE OF code, stdout, stderr, error_type, error_message, error_traceback
        ON executions WHEN old.seq <= (SELECT indexed_up_to FROM executions_fts_state) BEGIN
            INSERT INTO executions_fts (executions_fts, rowid, code, stdout, stderr, error_type,
                                        error_message, error_traceback)
            VALUES ('delete', old.seq, old.code, old.stdout, old.stderr, old.error_type,
                    old.error_message, old.error_traceback);
            INSERT INTO executions_fts (rowid, code, stdout, stderr, error_type, error_message,
                                        error_traceback)
            VALUES (new.seq, new.code, new.stdout, new.stderr, new.error_type,
                    new.error_message, new.error_traceback);
        END;
        INSERT INTO executions_fts (executions_fts) VALUES ('rebuild');
        INSERT INTO executions_fts_state (id, indexed_up_to)
        SELECT 1, coalesce(max(seq), 0) FROM executions;

        -- Every value of backend, source and function that occurs (or occurred: prune
        -- recomputes them), for filter choices. An insert that finds its values here
        -- writes nothing, unlike an index, which every insert writes.
        CREATE TABLE execution_facets (
            kind  TEXT NOT NULL,                    -- backend, source, function
            value TEXT NOT NULL,
            PRIMARY KEY (kind, value)
        ) WITHOUT ROWID;
        CREATE TRIGGER executions_facets AFTER INSERT ON executions BEGIN
            INSERT OR IGNORE INTO execution_facets (kind, value)
            VALUES ('backend', new.backend), ('source', new.source);
            INSERT OR IGNORE INTO execution_facets (kind, value)
            SELECT 'function', new.function WHERE new.function IS NOT NULL;
        END;
        INSERT OR IGNORE INTO execution_facets (kind, value)
        SELECT 'backend', backend FROM executions UNION SELECT 'source', source FROM executions
        UNION SELECT 'function', function FROM executions WHERE function IS NOT NULL;

        -- The words of a turn a person searches for: the model's reply (its text and the
        -- calls it made) and the feedback sent back. A view supplies them to the index.
        CREATE VIEW agent_turn_text AS
        SELECT seq,
               coalesce(json_extract(reply_json, '$.content'), '') || ' ' || coalesce(
                   (SELECT group_concat(coalesce(json_extract(c.value, '$.function.name'), '')
                                        || ' ' ||
                                        coalesce(json_extract(c.value, '$.function.arguments'), ''),
                                        ' ')
                    FROM json_each(CASE WHEN json_valid(reply_json) THEN reply_json END,
                                   '$.tool_calls') AS c), '') AS reply,
               coalesce(feedback_text, '') AS feedback
        FROM agent_turns;
        CREATE VIRTUAL TABLE agent_turns_fts USING fts5 (
            reply, feedback, content = 'agent_turn_text', content_rowid = 'seq'
        );
        CREATE TRIGGER agent_turns_fts_insert AFTER INSERT ON agent_turns BEGIN
            INSERT INTO agent_turns_fts (rowid, reply, feedback)
            SELECT seq, reply, feedback FROM agent_turn_text WHERE seq = new.seq;
        END;
        CREATE TRIGGER agent_turns_fts_delete BEFORE DELETE ON agent_turns BEGIN
            INSERT INTO agent_turns_fts (agent_turns_fts, rowid, reply, feedback)
            SELECT 'delete', seq, reply, feedback FROM agent_turn_text WHERE seq = old.seq;
        END;
        CREATE TRIGGER agent_turns_fts_update_before BEFORE UPDATE OF reply_json, feedback_text
        ON agent_turns BEGIN
            INSERT INTO agent_turns_fts (agent_turns_fts, rowid, reply, feedback)
            SELECT 'delete', seq, reply, feedback FROM agent_turn_text WHERE seq = old.seq;
        END;
        CREATE TRIGGER agent_turns_fts_update_after AFTER UPDATE OF reply_json, feedback_text
        ON agent_turns BEGIN
            INSERT INTO agent_turns_fts (rowid, reply, feedback)
            SELECT seq, reply, feedback FROM agent_turn_text WHERE seq = new.seq;
        END;
        -- ('rebuild' reads a content table, not a view: back-fill row by row instead.)
        INSERT INTO agent_turns_fts (rowid, reply, feedback)
        SELECT seq, reply, feedback FROM agent_turn_text;
        """,
    ),
    Migration(
        5,
        "evaluations and evaluation_items tables",
        """
        CREATE TABLE evaluations (
            id               TEXT PRIMARY KEY,         -- ULID, sorts by creation time
            created_at       TEXT NOT NULL,            -- ISO 8601, UTC, fixed width
            finished_at      TEXT,                     -- NULL until every item is done
            status           TEXT NOT NULL,            -- running, finished, interrupted
            dataset          TEXT NOT NULL,            -- a dataset name, or a file's path
            split            TEXT,
            dataset_path     TEXT NOT NULL,            -- the file the problems came from
            dataset_sha256   TEXT NOT NULL,            -- of that file, when the evaluation began
            method           TEXT NOT NULL,            -- mathchat, pot, vanilla
            model            TEXT,
            base_url         TEXT,
            backend          TEXT NOT NULL,
            function_set     TEXT,                     -- the learned functions' set, if any
            checker_version  TEXT NOT NULL,            -- the answer checker that gave the verdicts
            total            INTEGER NOT NULL,         -- problems in the sample
            settings_json    TEXT NOT NULL DEFAULT '{}',   -- sample, turns, limits, functions, ...
            error_json       TEXT NOT NULL DEFAULT 'null'  -- why it stopped early, if it did
        );
        CREATE INDEX evaluations_created_at ON evaluations (created_at);
        CREATE TABLE evaluation_items (
            evaluation_id    TEXT NOT NULL REFERENCES evaluations (id) ON DELETE CASCADE,
            position         INTEGER NOT NULL,         -- 0, 1, ... in the sample's order
            problem_id       TEXT NOT NULL,
            type             TEXT,
            level            INTEGER,
            problem_json     TEXT NOT NULL,            -- the whole problem, gold answer included
            status           TEXT NOT NULL DEFAULT 'pending',  -- pending, done
            attempts         INTEGER NOT NULL DEFAULT 0,       -- conversations started for it
            agent_run_id     TEXT REFERENCES agent_runs (id),  -- the conversation that counted
            run_status       TEXT,                     -- how that conversation ended
            answer           TEXT,                     -- the extracted answer (NULL: none)
            correct          INTEGER,                  -- 1, 0; NULL while pending
            verdict_json     TEXT NOT NULL DEFAULT 'null',  -- the checker's verdict and reason
            started_at       TEXT,
            finished_at      TEXT,
            duration_ms      INTEGER,
            PRIMARY KEY (evaluation_id, position),
            UNIQUE (evaluation_id, problem_id)
        );
        CREATE INDEX evaluation_items_pending ON evaluation_items (evaluation_id, status);
        CREATE INDEX evaluation_items_agent_run ON evaluation_items (agent_run_id);
        """,
    ),
    Migration(
        6,
        "optimizations, optimization_epochs and optimization_actions tables",
        """
        CREATE TABLE optimizations (
            id                  TEXT PRIMARY KEY,         -- ULID, sorts by creation time
            created_at          TEXT NOT NULL,            -- ISO 8601, UTC, fixed width
            finished_at         TEXT,                     -- NULL until it has ended
            status              TEXT NOT NULL,            -- running, finished, interrupted
            stop_reason         TEXT,                     -- why it ended when it did
            dataset             TEXT NOT NULL,            -- the training problems: a name or a path
            split               TEXT,
            dataset_path        TEXT NOT NULL,
            dataset_sha256      TEXT NOT NULL,
            method              TEXT NOT NULL,            -- how the agent solves: mathchat, pot
            model               TEXT,                     -- the agent's model
            base_url            TEXT,
            optimizer_model     TEXT,
            optimizer_base_url  TEXT,
            backend             TEXT NOT NULL,
            set_name            TEXT NOT NULL,            -- the trained set (function_versions.set_name)
            out_path            TEXT,                     -- where the best set is saved
            epochs              INTEGER NOT NULL,         -- optimizer epochs asked for
            best_epoch          INTEGER,                  -- the epoch that measured the best set
            best_success_rate   REAL,
            best_functions_json TEXT NOT NULL DEFAULT 'null',  -- the best set (what is saved)
            settings_json       TEXT NOT NULL DEFAULT '{}',    -- sample, steps, patience, ...
            error_json          TEXT NOT NULL DEFAULT 'null'   -- why it stopped early, if it did
        );
        CREATE INDEX optimizations_created_at ON optimizations (created_at);
        CREATE TABLE optimization_epochs (
            optimization_id  TEXT NOT NULL REFERENCES optimizations (id) ON DELETE CASCADE,
            epoch            INTEGER NOT NULL,         -- 0: the starting set; then one per step
            status           TEXT NOT NULL,            -- step, evaluate, done
            started_at       TEXT NOT NULL,
            finished_at      TEXT,
            functions_json   TEXT NOT NULL,            -- the set this epoch measures (as far as
                                                       -- its step got, while it runs)
            step_end         TEXT,                     -- how the optimizer's step ended
            evaluation_id    TEXT REFERENCES evaluations (id),  -- the measurement, if any
            correct          INTEGER,
            total            INTEGER,
            success_rate     REAL,                     -- NULL when nothing was measured
            outcome          TEXT,                     -- baseline, improved, kept, rolled_back,
                                                       -- unchanged
            PRIMARY KEY (optimization_id, epoch)
        );
        CREATE INDEX optimization_epochs_evaluation ON optimization_epochs (evaluation_id);
        CREATE TABLE optimization_actions (
            id                  INTEGER PRIMARY KEY,      -- order of the proposals
            optimization_id     TEXT NOT NULL,
            epoch               INTEGER NOT NULL,         -- the epoch whose step proposed it
            created_at          TEXT NOT NULL,
            agent_run_id        TEXT REFERENCES agent_runs (id),  -- the optimizer's conversation
            agent_turn          INTEGER,
            outcome             TEXT NOT NULL,            -- accepted, rejected, terminated, ended
            action              TEXT,                     -- add_function, revise_function,
                                                          -- remove_function; NULL: none readable
            function            TEXT,
            code                TEXT,                     -- the feedback code of a refusal
            reason              TEXT NOT NULL DEFAULT '', -- why refused, or what the smoke call showed
            spec_json           TEXT,                     -- the function proposed
            arguments_json      TEXT NOT NULL DEFAULT 'null',  -- the call's arguments as given
            function_version_id INTEGER REFERENCES function_versions (id),  -- the change it made
            rolled_back         INTEGER NOT NULL DEFAULT 0,
            FOREIGN KEY (optimization_id, epoch)
                REFERENCES optimization_epochs (optimization_id, epoch) ON DELETE CASCADE,
            FOREIGN KEY (agent_run_id, agent_turn) REFERENCES agent_turns (run_id, number)
        );
        CREATE INDEX optimization_actions_epoch ON optimization_actions (optimization_id, epoch);
        CREATE INDEX optimization_actions_agent_run ON optimization_actions (agent_run_id);
        CREATE INDEX optimization_actions_version ON optimization_actions (function_version_id);
        """,
    ),
    Migration(
        7,
        "the AgentOptimizer's runs over epochs are trainings: tables, columns and indexes renamed",
        # One word in the CLI, the viewer, the code and the tables. RENAME carries the rows,
        # and SQLite rewrites the foreign keys that name a renamed table or column; index
        # names cannot be changed in place, so those are made again.
        """
        ALTER TABLE optimizations RENAME TO trainings;
        ALTER TABLE optimization_epochs RENAME TO training_epochs;
        ALTER TABLE optimization_actions RENAME TO training_actions;
        ALTER TABLE training_epochs RENAME COLUMN optimization_id TO training_id;
        ALTER TABLE training_actions RENAME COLUMN optimization_id TO training_id;
        DROP INDEX optimizations_created_at;
        DROP INDEX optimization_epochs_evaluation;
        DROP INDEX optimization_actions_epoch;
        DROP INDEX optimization_actions_agent_run;
        DROP INDEX optimization_actions_version;
        CREATE INDEX trainings_created_at ON trainings (created_at);
        CREATE INDEX training_epochs_evaluation ON training_epochs (evaluation_id);
        CREATE INDEX training_actions_epoch ON training_actions (training_id, epoch);
        CREATE INDEX training_actions_agent_run ON training_actions (agent_run_id);
        CREATE INDEX training_actions_version ON training_actions (function_version_id);
        """,
    ),
    Migration(
        8,
        "the owner of each evaluation and training (the process that runs it)",
        # As agent runs record theirs: a running job whose process is gone reads as
        # interrupted, and one whose process is alive cannot be resumed a second time
        # (runner.logs.job_owner). Jobs from before have none: they stay as they were.
        """
        ALTER TABLE evaluations ADD COLUMN owner_json TEXT;  -- host, pid, start time, boot id
        ALTER TABLE trainings ADD COLUMN owner_json TEXT;
        """,
    ),
    Migration(
        9,
        "the search indexes use the trigram tokenizer (any part of a word, in any script)",
        # unicode61 splits words at spaces and punctuation, so a CJK sentence was one word
        # and nothing inside it could be found (runner.logs.search). Same columns, same
        # triggers (they name the tables, which are made again here), then rebuilt.
        """
        DROP TABLE executions_fts;
        CREATE VIRTUAL TABLE executions_fts USING fts5 (
            code, stdout, stderr, error_type, error_message, error_traceback,
            content = 'executions', content_rowid = 'seq', columnsize = 0,
            tokenize = 'trigram'
        );
        INSERT INTO executions_fts (executions_fts) VALUES ('rebuild');
        UPDATE executions_fts_state SET indexed_up_to = (SELECT coalesce(max(seq), 0)
                                                          FROM executions);
        DROP TABLE agent_turns_fts;
        CREATE VIRTUAL TABLE agent_turns_fts USING fts5 (
            reply, feedback, content = 'agent_turn_text', content_rowid = 'seq',
            tokenize = 'trigram'
        );
        INSERT INTO agent_turns_fts (rowid, reply, feedback)
        SELECT seq, reply, feedback FROM agent_turn_text;
        """,
    ),
    Migration(
        10,
        "files handed to and made by executions, each content stored once (runner.logs.execution_files)",
        """
        CREATE TABLE file_blobs (
            sha256  TEXT PRIMARY KEY,     -- of the content
            size    INTEGER NOT NULL,
            data    BLOB                  -- NULL: recorded past the log's cap for files
        );
        CREATE TABLE execution_files (
            execution_id  TEXT NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
            direction     TEXT NOT NULL CHECK (direction IN ('in', 'out')),
            position      INTEGER NOT NULL, -- order within the execution's files
            name          TEXT NOT NULL,    -- a relative path in the run's directory
            size          INTEGER NOT NULL,
            media_type    TEXT NOT NULL,    -- sniffed from the content
            sha256        TEXT NOT NULL REFERENCES file_blobs (sha256),
            PRIMARY KEY (execution_id, direction, position)
        );
        CREATE INDEX execution_files_sha256 ON execution_files (sha256);
        """,
    ),
]


def check_migrations(migrations: Sequence[Migration]) -> None:
    """Refuse a list whose numbers are not 1, 2, 3, ... (a typo would skip or repeat a step)."""
    numbers = [m.number for m in migrations]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValueError(f"migration numbers must be 1..{len(numbers)} in order, got {numbers}")


def latest_version(migrations: Sequence[Migration] = MIGRATIONS) -> int:
    return migrations[-1].number if migrations else 0


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def split_statements(sql: str) -> Iterator[str]:
    """The statements of a script, one at a time.

    `executescript` would be simpler, but on Python 3.11 it commits any open
    transaction first, which would break the one-transaction guarantee. Splitting on
    ';' and asking SQLite whether the text so far is complete handles semicolons in
    strings, comments and trigger bodies.
    """
    pending = ""
    for piece in sql.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if _has_code(pending):
                yield pending.strip()
            pending = ""
    if _has_code(pending.rstrip(";")):
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()[:80]!r}")


def _has_code(text: str) -> bool:
    """True if the text holds more than whitespace, comments and semicolons."""
    lines = (line.split("--", 1)[0] for line in text.splitlines())
    return any(line.strip().strip(";").strip() for line in lines)


def apply_migrations(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the database up to the newest migration; returns the resulting version.

    `conn` must be in autocommit mode (`isolation_level=None`) so that the explicit
    BEGIN below is the only transaction. All pending migrations run in one
    transaction, so a crash or a failing statement leaves the previous version intact.
    """
    check_migrations(migrations)
    latest = latest_version(migrations)
    current = user_version(conn)
    _refuse_newer(current, latest, path)
    if current == latest:
        return current  # the common case: no write lock needed
    # IMMEDIATE takes the write lock now, so two processes opening a fresh file at the
    # same time do not both create the tables; the loser re-reads the version below.
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = user_version(conn)
        _refuse_newer(current, latest, path)
        for migration in migrations:
            if migration.number > current:
                _apply_one(conn, migration, current, path)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return latest


def _apply_one(conn: sqlite3.Connection, migration: Migration, previous: int, path: Path) -> None:
    try:
        for statement in split_statements(migration.sql):
            conn.execute(statement)
        # PRAGMA does not take parameters; the number is an int we control.
        conn.execute(f"PRAGMA user_version = {int(migration.number)}")
    except sqlite3.Error as exc:
        raise LogStoreError(
            f"migration {migration.number} ({migration.description}) of {path} failed: {exc}; "
            f"the database was left at version {previous}",
            fix="this is a bug in runner; please report it with this message",
        ) from exc


def _refuse_newer(current: int, latest: int, path: Path) -> None:
    if current > latest:
        raise LogStoreError(
            f"{path} was written by a newer runner (schema version {current}, "
            f"this runner knows versions up to {latest})",
            fix="upgrade runner (pip install -U runner), or set RUNNER_HOME to another "
            "directory to start a separate log",
        )
