package platform

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
)

// FindNATSServer returns the path of a nats-server binary, or "".
func FindNATSServer() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

// NATSURL is the platform's NATS URL, or "" when it runs without NATS.
func (p *Platform) NATSURL() string {
	if !p.cfg.NATS {
		return ""
	}
	return "nats://" + p.cfg.NATSAddr
}

// startNATS starts the NATS server, points the cells and the GTR at it, and
// publishes the reference data snapshot.
func (p *Platform) startNATS(ctx context.Context) error {
	host, port, err := net.SplitHostPort(p.cfg.NATSAddr)
	if err != nil {
		return fmt.Errorf("platform: NATSAddr: %w", err)
	}
	store := filepath.Join(p.cfg.DataDir, "nats")
	proc := &Proc{
		Name:    NATS,
		Addr:    p.cfg.NATSAddr,
		path:    p.cfg.NATSServerBin,
		args:    []string{"-js", "-a", host, "-p", port, "-sd", store},
		env:     os.Environ(),
		logPath: filepath.Join(p.logDir, NATS+".log"),
		stdout:  newPrefixWriter(NATS, p.cfg.Stdout, &p.outMu),
		stderr:  newPrefixWriter(NATS, p.cfg.Stderr, &p.outMu),
		ready: func(ctx context.Context, exited <-chan struct{}) error {
			return waitTCP(ctx, p.cfg.NATSAddr, exited)
		},
	}
	p.procs[NATS] = proc
	p.order = append(p.order, proc)
	if err := proc.start(ctx); err != nil {
		return fmt.Errorf("platform: %w", err)
	}
	url := p.NATSURL()
	p.cfg.Env = append(p.cfg.Env, "CELL_NATS_URL="+url, "GTR_NATS_URL="+url)
	if p.cfg.RefDataSource == "" {
		return nil
	}
	bin := filepath.Join(p.cfg.BinDir, "replicator")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("platform: replicator: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-nats-url", url, "snapshot", "-source", p.cfg.RefDataSource)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("platform: publishing reference data: %w: %s", err, out)
	}
	return nil
}
