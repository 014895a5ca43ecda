// Package store is where rules live: the Store applies rules (through
// rules.Prepare, rules.CheckUpdate and rules.CheckCollision), installs them
// in a Runtime (the datapath) and commits them to a Backend — the local
// FileBackend (rules.json) or etcd (rules/store/etcdstore), both held to
// one contract by rules/store/storetest. Migrate copies a rule set between
// backends.
//
// Apply is LoxiLB's upsert keyed by (VIP, port, protocol, block, host,
// path_prefix, path_match_mode, model_name): a new key is created, a changed
// one updated in place (ep_role/nixl_port included), and a body that means the
// same as the stored one (defaults resolved) is 409 rule_exists. Each
// mutation holds one mutex across decide → Runtime.Install/Remove → durable
// persist → publish: if Install fails nothing changed; if persisting fails the
// runtime is rolled back and the caller gets 500 persist_failed. Reads never
// wait on a mutation: they see an immutable snapshot published after each
// commit.
//
// The rule set is kept in <StateDir>/rules.json
// ({"schema_version":1,"rules":[…],"checksum":"sha256:…"}, plus
// "journal_seq" once a journal record is folded in; mode 0600), always
// written whole via a temp file, fsync, rename and directory fsync. Replay
// feeds each persisted rule through the same decode/validate/compile/Install
// path; until it finishes every write is 503 not_ready. A corrupt file is renamed rules.json.corrupt-<ts> and boot
// continues empty; rules that no longer validate are skipped, saved to
// rules.json.rejected-<ts> with the reason, and the set is rewritten without
// them. A valid rule the datapath refuses (a certificate not there yet, a VIP
// address not up yet) is kept with Entry.InstallError, reported not ready,
// and retried with backoff until it serves (pending.go), at replay and from
// the watch alike. Stale temp files from a crash mid-write are removed at
// open.
//
// With Options.Journal.Enabled (the default) a write appends one fsynced,
// checksummed record to <StateDir>/rules.journal, and rules.json is
// rewritten only when the journal passes a bound (1000 records, 4 MiB, or
// 5 s after the first write it lacks), after a boot that replayed records
// and at Close (journal.go states the crash-safety argument), so a write
// costs the size of the change rather than of the rule set. With the
// journal off every change rewrites rules.json. Either way an acknowledged
// change survives a crash.
package store
