// Package etcdstore keeps the rule set in etcd so several gateway replicas
// serve one fleet: it is the shared store.Backend beside the local
// store.FileBackend, held to the same contract by rules/store/storetest.
//
// Layout under the prefix (default /infergate):
//
//	<prefix>/rules/<BackendKey>   one rule's wire JSON, e.g. /infergate/rules/10.0.0.1:80|tcp
//	<prefix>/replicas/<id>        each replica's id, API address and applied revision (leased)
//
// A write is a transaction comparing the key's mod revision with the one the
// replica last applied (create: the key must not exist), so two replicas
// updating one rule never lose a write silently: the loser gets 409
// revision_conflict. Every replica follows the prefix with a watch that
// resumes from its last revision and reloads the whole set when that
// revision was compacted. While etcd is unreachable the replica keeps
// serving what it applied and reports itself degraded.
package etcdstore
