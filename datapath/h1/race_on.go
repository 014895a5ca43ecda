//go:build race

package h1

// raceBuild poisons every finished request's state (recycle.go).
const raceBuild = true
