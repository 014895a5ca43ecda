package main

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// TestKVRelayForwardsToEveryGateway: a message an engine publishes to the
// relay's bound address reaches both gateways' bound sockets with its
// frames unchanged (topic, sequence, payload).
func TestKVRelayForwardsToEveryGateway(t *testing.T) {
	in := "ipc://" + filepath.Join(t.TempDir(), "engines")
	r, err := startKVRelay(in)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Term()
	var subs []*zmq.Socket
	for i := range kvRelayOuts {
		s, err := ctx.NewSocket(zmq.SUB)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.SetLinger(0)
		_ = s.SetSubscribe("kv@")
		_ = s.SetRcvtimeo(100 * time.Millisecond)
		if err := s.Bind(r.addr(i)); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	pub, err := ctx.NewSocket(zmq.PUB)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	_ = pub.SetLinger(0)
	if err := pub.Connect(in); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("kv@127.0.0.1:8000@m"), {0, 0, 0, 0, 0, 0, 0, 7}, {0x93, 0x01, 0xc0}}
	// A PUB drops what it sends before its peers have joined: publish
	// until each gateway has received one.
	got := make([][][]byte, len(subs))
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := pub.SendMessage(want[0], want[1], want[2]); err != nil {
			t.Fatal(err)
		}
		done := true
		for i, s := range subs {
			if got[i] == nil {
				if frames, err := s.RecvMessageBytes(0); err == nil {
					got[i] = frames
				}
			}
			done = done && got[i] != nil
		}
		if done {
			break
		}
	}
	for i, frames := range got {
		if len(frames) != len(want) {
			t.Fatalf("gateway %d got %d frames %q, want %q", i, len(frames), frames, want)
		}
		for k := range want {
			if !bytes.Equal(frames[k], want[k]) {
				t.Errorf("gateway %d frame %d = %x, want %x", i, k, frames[k], want[k])
			}
		}
	}
}
