//go:build !race

package datapath

// raceDetector: see race_on_test.go.
const raceDetector = false
