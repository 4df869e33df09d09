package lifecycle

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestLife(t *testing.T) {
	var l Life
	if !l.Begin() || l.Begin() {
		t.Fatal("Begin: want true once, then false")
	}
	l.Serving()
	select {
	case <-l.Done():
		t.Fatal("Done closed while serving")
	default:
	}
	boom := errors.New("serve failed")
	l.End(boom)
	l.End(errors.New("second"))
	<-l.Done()
	if l.Err() != boom {
		t.Fatalf("Err %v, want the first reason", l.Err())
	}
	if !l.Stop() || l.Stop() {
		t.Fatal("Stop: want wasServing once")
	}
	if l.Begin() {
		t.Fatal("Begin after Stop")
	}
}

func TestFailedStart(t *testing.T) {
	var l Life
	l.Begin()
	boom := errors.New("listen")
	l.Failed(boom)
	<-l.Done()
	if l.Err() != boom || l.Stop() {
		t.Fatalf("after Failed: Err %v, want %v, and nothing to stop", l.Err(), boom)
	}
}

func TestShutdownOnce(t *testing.T) {
	var l Life
	n := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := l.Shutdown(func() error { n++; return errors.New("x") }); err == nil {
				t.Error("a later call did not get the first call's error")
			}
		})
	}
	wg.Wait()
	if n != 1 {
		t.Fatalf("stop ran %d times", n)
	}
}

func TestReleasesInReverse(t *testing.T) {
	var r Releases
	var got []int
	r.Add(func() { got = append(got, 1) })
	r.AddCtx(func(context.Context) { got = append(got, 2) })
	r.Add(func() { got = append(got, 3) })
	r.Release(context.Background())
	r.Release(context.Background())
	if len(got) != 3 || got[0] != 3 || got[1] != 2 || got[2] != 1 {
		t.Fatalf("released %v, want [3 2 1] once", got)
	}
}
