package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// describeVolumesCommand prints the emulator's view of its volumes, for
// scripts and demos that want to show what the cloud holds.
const describeVolumesCommand = "describe-volumes"

// describeVolumes asks a running emulator's admin listener for its volumes
// and prints them as a table or JSON.
func describeVolumes(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ec2-emulator "+describeVolumesCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	adminURL := fs.String("admin", "http://"+defaultAdminListen, "the running emulator's admin URL")
	asJSON := fs.Bool("json", false, "print the volumes as JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(strings.TrimRight(*adminURL, "/") + admin.PathVolumes)
	if err != nil {
		fmt.Fprintf(stderr, "ask the emulator: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "ask the emulator: %s %v %s\n", resp.Status, err, body)
		return 1
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return 0
	}
	var vols []model.Volume
	if err := json.Unmarshal(body, &vols); err != nil {
		fmt.Fprintf(stderr, "read the emulator's answer: %v\n", err)
		return 1
	}
	writeVolumeTable(stdout, vols)
	return 0
}

// writeVolumeTable prints one line per volume.
func writeVolumeTable(w io.Writer, vols []model.Volume) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tZONE\tSIZE\tTYPE\tSTATE\tATTACHMENTS\tTAGS")
	for _, v := range vols {
		var atts []string
		for _, a := range v.Attachments {
			s := a.InstanceID + ":" + a.Device + " " + string(a.State)
			if a.HostDevice != "" {
				s += " (" + a.HostDevice + ")"
			}
			atts = append(atts, s)
		}
		var tags []string
		for k, val := range v.Tags {
			tags = append(tags, k+"="+val)
		}
		slices.Sort(tags)
		fmt.Fprintf(tw, "%s\t%s\t%dGiB\t%s\t%s\t%s\t%s\n", v.ID, v.Zone, v.Size, v.Type, v.State,
			orDash(strings.Join(atts, ", ")), orDash(strings.Join(tags, ",")))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
