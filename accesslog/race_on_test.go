//go:build race

package accesslog

// raceDetector: under the race detector sync.Pool drops a share of what it
// is given, so allocation counts are not the program's.
const raceDetector = true
