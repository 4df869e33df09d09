package pgcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Barman is CloudNativePG's Barman Cloud plugin's tools (Debian's
// barman-cli-cloud: barman-cloud-backup, -wal-archive, -restore and
// -wal-restore) pointed at an object store as the plugin's ObjectStore
// points them (deploy/k8s/base/cell/backup.yaml): the store's endpoint, a
// destination path, the server's name under it (the cell's ID), gzip for
// the data and the WAL. The plugin's sidecar runs the same tools beside
// each Postgres instance.
type Barman struct {
	// Endpoint is the store's URL (endpointURL).
	Endpoint string
	// Destination is s3://BUCKET/PATH (destinationPath).
	Destination string
	// Server is the server's name in the store (serverName).
	Server string
	// Env is what the tools need to reach the store (credentials, region,
	// CA): NAME=value pairs of safe characters, since restore_command
	// carries them into the server's shell.
	Env []string
	// ImmediateCheckpoint starts a base backup with a checkpoint as fast
	// as the server can (onlineConfiguration.immediateCheckpoint); without
	// it, the backup waits for a spread one, as the plugin does by
	// default.
	ImmediateCheckpoint bool
}

// command is tool run as cred (the current user when nil), in its own
// process group, with b's environment, from dir.
func (b Barman) command(cred *syscall.Credential, dir, tool string, args ...string) *exec.Cmd {
	cmd := exec.Command(tool, append([]string{"--endpoint-url", b.Endpoint}, args...)...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LC_ALL=C.UTF-8"}, b.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = killTimeout
	return cmd
}

// run runs tool to its end, killed if ctx ends first, and returns its
// output.
func (b Barman) run(ctx context.Context, cred *syscall.Credential, dir, tool string, args ...string) (string, error) {
	cmd := b.command(cred, dir, tool, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := runContext(ctx, cmd)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", tool, err, lastLines(out.String(), 5))
	}
	return out.String(), nil
}

// Backup takes a base backup of c into the store (barman-cloud-backup:
// the server's files read beside it while it runs, as the plugin's
// sidecar reads its instance's, connecting as the superuser by the
// socket) and returns its backup ID.
func (b Barman) Backup(ctx context.Context, c *Cluster) (string, error) {
	args := []string{"--gzip", "--jobs", "2", "--host", socketDir(c.dataDir), "--port", fmt.Sprint(c.port),
		"--user", Superuser, "--dbname", "postgres"}
	if b.ImmediateCheckpoint {
		args = append(args, "--immediate-checkpoint")
	}
	if _, err := b.run(ctx, c.cred, c.dataDir, "barman-cloud-backup", append(args, b.Destination, b.Server)...); err != nil {
		return "", fmt.Errorf("pgcluster: barman backup: %w", err)
	}
	out, err := b.run(ctx, c.cred, c.dataDir, "barman-cloud-backup-list", "--format", "json", b.Destination, b.Server)
	if err != nil {
		return "", fmt.Errorf("pgcluster: barman backup: %w", err)
	}
	var list struct {
		Backups []struct {
			ID string `json:"backup_id"`
		} `json:"backups_list"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Backups) == 0 {
		return "", fmt.Errorf("pgcluster: barman backup: no backup listed (%v): %s", err, lastLines(out, 5))
	}
	return list.Backups[len(list.Backups)-1].ID, nil
}

// ArchiveWAL archives one complete WAL segment file into the store
// (barman-cloud-wal-archive, what the plugin runs as archive_command).
func (b Barman) ArchiveWAL(ctx context.Context, segment string) error {
	if _, err := b.run(ctx, nil, filepath.Dir(segment), "barman-cloud-wal-archive", "--gzip", b.Destination, b.Server, segment); err != nil {
		return fmt.Errorf("pgcluster: barman wal archive: %w", err)
	}
	return nil
}

// RestoreBarman makes a new server from the store, as CloudNativePG's
// recovery bootstrap from the plugin does: cfg.DataDir, which must be
// missing or empty, is filled with base backup backupID
// (barman-cloud-restore, as the server user), and the server started
// with cfg replays every segment archived after it (restore_command:
// barman-cloud-wal-restore), then, at the end of the archive, takes
// writes on a new timeline. It returns once it does, as Restore does.
func RestoreBarman(ctx context.Context, b Barman, backupID string, cfg Config) (*Cluster, error) {
	for _, kv := range b.Env {
		if strings.ContainsAny(kv, "'\"\\ $`;&|<>\n") {
			return nil, errors.New("pgcluster: barman restore: an environment value is unsafe in a shell command")
		}
	}
	if strings.ContainsAny(b.Endpoint+b.Destination+b.Server, "'\"\\ $`;&|<>\n") {
		return nil, errors.New("pgcluster: barman restore: the store's endpoint, destination or server name is unsafe in a shell command")
	}
	dataDir, cred, err := newDataDir(cfg)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: barman restore: %w", err)
	}
	if _, err := b.run(ctx, cred, dataDir, "barman-cloud-restore", b.Destination, b.Server, backupID, dataDir); err != nil {
		return nil, fmt.Errorf("pgcluster: barman restore: %w", err)
	}
	// A missing segment (past the end of the archive) ends the recovery.
	restore := "env HOME=" + os.TempDir() + " " + strings.Join(b.Env, " ") + " barman-cloud-wal-restore --endpoint-url " + b.Endpoint + " " +
		b.Destination + " " + b.Server + " %f %p"
	return recoverAt(ctx, dataDir, cred, restore, cfg)
}

// lastLines is the last n lines of s, for an error.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
