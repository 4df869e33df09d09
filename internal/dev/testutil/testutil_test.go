package testutil

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	n := 0
	if !Within(time.Second, func() bool { n++; return n == 3 }) {
		t.Fatal("Within gave up on a condition that held on its third check")
	}
	if Within(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("Within reported a condition that never held")
	}
}

func TestStopped(t *testing.T) {
	if Stopped(os.Getpid()) {
		t.Fatal("the test process reads as stopped")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, "sleep stopped after SIGSTOP", func() bool { return Stopped(cmd.Process.Pid) })
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, "sleep running after SIGCONT", func() bool { return !Stopped(cmd.Process.Pid) })
}
