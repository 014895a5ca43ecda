// Package selector serves rules whose endpoints come from engine
// self-registrations (the rule field endpointSelector).
//
// Runtime sits between the rule store and the datapath: a rule without a
// selector passes straight through; a selector rule is installed with the
// endpoints resolved from the registrations under <prefix>/engines/, and
// re-installed (same datapath Install path, a new generation) whenever the
// registrations it matches change. An endpoint that registers appears (and
// goes through the rule's probes); one whose lease expires is removed, so
// the datapath drains it and lets in-flight requests finish.
//
// Each registration is checked against the rule as the rule's own
// validation would check a static endpoint: a foreign engine, a role the
// rule cannot use, a bootstrap, ZMQ or block-size fact the rule contradicts
// is refused for that rule, shown in the rule's status and counted.
package selector
