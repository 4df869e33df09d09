package platform

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// RunInfo is what a running platform tells tools outside the launcher's
// process (cellpay drill) about itself: where everything listens, the
// cells' databases, and each component's process ID. Start writes it to
// DataDir/run.json; Stop removes it.
type RunInfo struct {
	GTRAddr         string `json:"gtr_addr"`
	AdminAddr       string `json:"admin_addr"`
	BackupGTRAddr   string `json:"backup_gtr_addr,omitempty"`
	BackupAdminAddr string `json:"backup_admin_addr,omitempty"`
	RESTAddr        string `json:"rest_addr,omitempty"`
	BackupRESTAddr  string `json:"backup_rest_addr,omitempty"`
	// GTRSite and BackupGTRSite are the access points' sites.
	GTRSite       string            `json:"gtr_site,omitempty"`
	BackupGTRSite string            `json:"backup_gtr_site,omitempty"`
	IssuerAddr    string            `json:"issuer_addr"`
	NATSURL       string            `json:"nats_url,omitempty"`
	Cells         []RunCell         `json:"cells"`
	PIDs          map[string]int    `json:"pids"`
	Logs          map[string]string `json:"logs"`
}

// RunCell is one cell of a RunInfo.
type RunCell struct {
	ID          string `json:"id"`
	Addr        string `json:"addr"`
	DatabaseURL string `json:"database_url"`
	// Instances are its orchestrators' addresses, the first Addr.
	Instances []string `json:"instances,omitempty"`
	// Primary and Standby are the addresses of the cell's private
	// Postgres nodes now ("" for none); PrimaryDataDir holds the
	// primary's postmaster.pid.
	Primary        string `json:"pg_primary,omitempty"`
	PrimaryDataDir string `json:"pg_primary_data_dir,omitempty"`
	Standby        string `json:"pg_standby,omitempty"`
}

// RunFile is the RunInfo file of the platform whose data folder is
// dataDir.
func RunFile(dataDir string) string { return filepath.Join(dataDir, "run.json") }

// ReadRunInfo reads the RunInfo of the platform running on dataDir.
func ReadRunInfo(dataDir string) (RunInfo, error) {
	var ri RunInfo
	b, err := os.ReadFile(RunFile(dataDir))
	if err != nil {
		return ri, fmt.Errorf("platform: is it running? %w", err)
	}
	if err := json.Unmarshal(b, &ri); err != nil {
		return ri, fmt.Errorf("platform: %s: %w", RunFile(dataDir), err)
	}
	return ri, nil
}

// RunInfo describes the running platform.
func (p *Platform) RunInfo() RunInfo {
	ri := RunInfo{
		GTRAddr: p.cfg.GTRAddr, AdminAddr: p.cfg.AdminAddr, RESTAddr: p.cfg.RESTAddr, IssuerAddr: p.cfg.IssuerAddr, NATSURL: p.NATSURL(),
		GTRSite: p.cfg.GTRSite, PIDs: map[string]int{}, Logs: map[string]string{},
	}
	if !p.cfg.NoBackupGTR {
		ri.BackupGTRAddr, ri.BackupAdminAddr, ri.BackupRESTAddr = p.cfg.BackupGTRAddr, p.cfg.BackupAdminAddr, p.cfg.BackupRESTAddr
		ri.BackupGTRSite = p.cfg.BackupGTRSite
	}
	for _, c := range p.cfg.Cells {
		rc := RunCell{ID: c.ID, Addr: c.Addr, DatabaseURL: p.CellDatabaseURL(c.ID)}
		for _, in := range p.cfg.instances(c) {
			rc.Instances = append(rc.Instances, in.Addr)
		}
		if pp := p.pairs[c.ID]; pp != nil {
			pp.mu.Lock()
			rc.Primary, rc.PrimaryDataDir = pp.nodes[pp.primary].addr(), pp.nodes[pp.primary].dataDir
			if pp.srv[1-pp.primary] != nil {
				rc.Standby = pp.nodes[1-pp.primary].addr()
			}
			pp.mu.Unlock()
		}
		ri.Cells = append(ri.Cells, rc)
	}
	for _, proc := range p.order {
		ri.PIDs[proc.Name] = proc.Pid()
		ri.Logs[proc.Name] = proc.LogPath()
	}
	return ri
}

// writeRunInfo writes RunFile; the file names database URLs, so 0600.
func (p *Platform) writeRunInfo() error {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	b, err := json.MarshalIndent(p.RunInfo(), "", "  ")
	if err != nil {
		return err
	}
	tmp := RunFile(p.cfg.DataDir) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, RunFile(p.cfg.DataDir))
}
