// Package deploy holds the deployment recipes (Kubernetes manifests here;
// the Dockerfile at the root and the systemd unit in packaging/). It has no
// code: its test loads every recipe and checks that the flags it passes to
// `infergate serve` parse and the rules it ships validate, so a renamed flag
// or a stricter validator breaks the build instead of a deployment.
package deploy
