//go:build !race

package accesslog

// raceDetector: see race_on_test.go.
const raceDetector = false
