package platform

import "net"

// Two sites on this machine (make run SITES=2): each site on a loopback
// address of its own, with the single-site layout's ports, so that a site
// is told apart by its address, and cut by it.
const (
	SiteAHost = "127.0.1.1"
	SiteBHost = "127.0.2.1"
	// SiteB is the second site's name, as config/gtr-sites.yaml names it.
	SiteB = "site-b"
	// TwoSitesGTRConfig is the routing table of the two-site layout.
	TwoSitesGTRConfig = "config/gtr-sites.yaml"
)

// TwoSitesCells are the cells of the two-site layout: cell-a and cell-b
// in site-a, cell-c and cell-d in site-b, each site's on :7081 and :7082
// of its address.
var TwoSitesCells = []CellSpec{
	{ID: "cell-a", Addr: net.JoinHostPort(SiteAHost, "7081")},
	{ID: "cell-b", Addr: net.JoinHostPort(SiteAHost, "7082")},
	{ID: "cell-c", Addr: net.JoinHostPort(SiteBHost, "7081")},
	{ID: "cell-d", Addr: net.JoinHostPort(SiteBHost, "7082")},
}

// TwoSites lays cfg out as two sites: the primary access point (partners'
// API :7070, admin :7071, REST :7060 when cfg serves REST) and cell-a and
// cell-b in site-a on SiteAHost; the backup access point, on the same
// ports, and cell-c and cell-d in site-b on SiteBHost. What the sites
// still share on 127.0.0.1 is said in docs/operations.md ("Two sites on
// this machine"): the NATS cluster, the issuer simulator (an outside
// party), the callback receiver and the cells' Postgres servers.
func TwoSites(cfg Config) Config {
	at := func(host, port string) string { return net.JoinHostPort(host, port) }
	cfg.GTRAddr, cfg.AdminAddr = at(SiteAHost, "7070"), at(SiteAHost, "7071")
	cfg.BackupGTRAddr, cfg.BackupAdminAddr = at(SiteBHost, "7070"), at(SiteBHost, "7071")
	if cfg.RESTAddr != "" {
		cfg.RESTAddr = at(SiteAHost, "7060")
	}
	if cfg.BackupRESTAddr != "" {
		cfg.BackupRESTAddr = at(SiteBHost, "7060")
	}
	cfg.NoBackupGTR = false
	cfg.GTRSite, cfg.BackupGTRSite = Site, SiteB
	cfg.GTRDialFrom, cfg.BackupGTRDialFrom = SiteAHost, SiteBHost
	cfg.Cells = TwoSitesCells
	return cfg
}
