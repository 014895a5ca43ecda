// Package swagger builds infergate's OpenAPI 2.0 document (LoxiLB serves
// swagger 2.0, so tooling written against it keeps working) and serves the
// Swagger UI from assets embedded in the binary (no CDN, works air-gapped).
//
// Contract:
//   - Model definitions are reflected from rules.Rule's JSON tags and from the
//     API's response structs (passed in as Views), so the document cannot
//     drift from what the handlers actually encode. Hand-written text
//     (descriptions, enums, bounds) is attached by "Type.jsonName" and a test
//     fails if an annotation names a field that no longer exists.
//   - Every POST carries worked example bodies; a test in package api decodes
//     and compiles each one, and checks that documented paths and gin routes
//     are the same set.
//
// The UI assets are swagger-ui-dist (see ui/README.md for version/licence).
package swagger
