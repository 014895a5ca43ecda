# Sourced by the bench scripts that load a gateway with wrk's small POST
# (proxy.sh, perfuser.sh, irpr.sh): one definition of the request and of
# the one-rule gateway in front of one engine, so every script measures
# the same request through the same rule.

# small_post_lua prints the wrk script of the small request: POST
# /v1/completions with a 55-byte JSON body.
small_post_lua() {
  cat <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"fake-model","prompt":"hello","max_tokens":4}'
wrk.headers["Content-Type"] = "application/json"
LUA
}

# one_rule_yaml NAME VIP ENGINE prints a rule file document: one fullproxy
# rule NAME on VIP (ip:port) with the one endpoint ENGINE (ip:port).
one_rule_yaml() {
  cat <<YAML
---
apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: $1
spec:
  serviceArguments: {externalIP: ${2%:*}, port: ${2#*:}, protocol: tcp, sel: 0, mode: 4}
  endpoints:
    - {endpointIP: ${3%:*}, targetPort: ${3#*:}, weight: 1}
YAML
}
