//go:build race

package datapath

// raceDetector: the race detector slows every memory access about tenfold;
// long-running tests size themselves down under it.
const raceDetector = true
