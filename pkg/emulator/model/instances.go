package model

import (
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Root volumes: every instance boots from one, as on EC2.
const (
	rootDeviceName = "/dev/xvda"
	rootVolumeSize = 8
	rootVolumeType = "gp3"
	gib            = int64(1) << 30
)

// declareInstances adds the configured instances that the saved state does
// not have yet (with a root volume each) and marks the local one. A spec
// without an ID matches a saved instance of the same type and zone, so a
// restart with the same flags finds the same instances. Without any
// configured instance, a fresh cloud gets one local instance and a restored
// one keeps what it had.
func (c *Cloud) declareInstances() error {
	specs := c.cfg.Instances
	if len(specs) == 0 {
		if len(c.st.Instances) > 0 {
			return nil
		}
		specs = []InstanceSpec{{Type: DefaultInstanceType, Zone: c.cfg.Zones[0].Name, Local: true}}
	}
	now := c.cfg.Now()
	matched := map[string]bool{}
	for _, spec := range specs {
		var in *Instance
		if spec.ID != "" {
			in = c.st.Instances[spec.ID]
		} else {
			in = c.unmatchedInstance(spec, matched)
		}
		if in != nil && in.Zone != spec.Zone {
			return fmt.Errorf("instance %s is in zone %s in the saved state, not %s", in.ID, in.Zone, spec.Zone)
		}
		if in == nil {
			var err error
			if in, err = c.launch(spec, now); err != nil {
				return err
			}
			c.st.Instances[in.ID] = in
		}
		in.Type = spec.Type
		in.Local = spec.Local
		in.View = spec.View
		if spec.PrivateIP != "" {
			in.NetworkInterfaces[0].PrivateIPs[0] = spec.PrivateIP
		}
		matched[in.ID] = true
	}
	for id, in := range c.st.Instances {
		if !matched[id] {
			in.Local = false
			in.View = nil
		}
	}
	return nil
}

// unmatchedInstance finds a saved instance for a spec without an ID:
// preferably the saved local one for a local spec, else one of the same
// type and zone.
func (c *Cloud) unmatchedInstance(spec InstanceSpec, matched map[string]bool) *Instance {
	ids := slices.Sorted(maps.Keys(c.st.Instances))
	if spec.Local {
		for _, id := range ids {
			if in := c.st.Instances[id]; in.Local && !matched[id] {
				return in
			}
		}
	}
	for _, id := range ids {
		if in := c.st.Instances[id]; !matched[id] && in.Type == spec.Type && in.Zone == spec.Zone {
			return in
		}
	}
	return nil
}

// launch builds a running instance with its network interfaces and root
// volume.
func (c *Cloud) launch(spec InstanceSpec, now time.Time) (*Instance, error) {
	id := spec.ID
	if id == "" {
		id = newID("i")
	}
	enis := max(spec.NetworkInterfaces, 1)
	in := &Instance{
		ID:         id,
		Type:       spec.Type,
		Zone:       spec.Zone,
		ImageID:    newID("ami"),
		LaunchTime: now.UTC().Truncate(time.Second),
		RootDevice: rootDeviceName,
		Tags:       maps.Clone(spec.Tags),
		Local:      spec.Local,
	}
	subnet, vpc := newID("subnet"), newID("vpc")
	for i := range enis {
		in.NetworkInterfaces = append(in.NetworkInterfaces, NetworkInterface{
			ID:           newID("eni"),
			MAC:          randomMAC(),
			DeviceNumber: i,
			PrivateIPs:   []string{randomPrivateIP()},
			SubnetID:     subnet,
			VPCID:        vpc,
		})
	}
	root := &Volume{
		ID:         newID("vol"),
		Zone:       spec.Zone,
		Size:       rootVolumeSize,
		Type:       rootVolumeType,
		Iops:       gp3DefaultIops,
		Throughput: gp3DefaultThroughput,
		CreateTime: in.LaunchTime,
		State:      VolumeInUse,
		Root:       true,
		Attachments: []*Attachment{{
			InstanceID:          id,
			Device:              rootDeviceName,
			State:               AttachmentAttached,
			AttachTime:          in.LaunchTime,
			DeleteOnTermination: true,
		}},
	}
	root.Attachments[0].VolumeID = root.ID
	if err := c.cfg.Store.CreateVolume(root.ID, int64(root.Size)*gib); err != nil {
		return nil, fmt.Errorf("create root volume of %s: %w", id, err)
	}
	c.st.Volumes[root.ID] = root
	return in, nil
}

// randomMAC returns a locally administered unicast MAC, as EC2's 0e:… ones.
func randomMAC() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("0e:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4])
}

// randomPrivateIP returns an address in 10.0.0.0/16.
func randomPrivateIP() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("10.0.%d.%d", b[0], max(b[1], 4))
}

// localLocked returns the local instance, or nil.
func (c *Cloud) localLocked() *Instance {
	for _, in := range c.st.Instances {
		if in.Local {
			return in
		}
	}
	return nil
}

// hostAttachedVolumes lists the volumes whose device should exist on this
// host: attached (or still detaching) to an instance the host plays (the
// local one, or one with a view), root excluded; each volume once.
func (c *Cloud) hostAttachedVolumes() []string {
	var ids []string
	for _, v := range c.st.Volumes {
		if v.Root {
			continue
		}
		for _, a := range v.Attachments {
			if c.onHost(v, a) && (a.State == AttachmentAttached || a.State == AttachmentDetaching) {
				ids = append(ids, v.ID)
				break
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// viewedAttachments maps each instance with a view to the volumes attached
// to it and their devices: what the view must expose after a restart (none
// for a stopped instance).
func (c *Cloud) viewedAttachments() map[string]map[string]string {
	out := map[string]map[string]string{}
	for id, in := range c.st.Instances {
		if in.View != nil {
			out[id] = map[string]string{}
		}
	}

	for _, v := range c.st.Volumes {
		for _, a := range v.Attachments {
			if m, ok := out[a.InstanceID]; ok && !v.Root && a.State == AttachmentAttached && a.HostDevice != "" && c.running(a) {
				m[v.ID] = a.HostDevice
			}
		}
	}
	return out
}

// ViewedInstanceAt is the instance with a view whose network interfaces
// carry the address, with its zone, so that IMDS answers the instance that
// asks; ok is false when there is none. Only instances with a view count:
// the random addresses of the others could be a real machine's.
func (c *Cloud) ViewedInstanceAt(ip string) (in Instance, zone Zone, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(c.st.Instances)) {
		cand := c.st.Instances[id]
		if cand.View == nil {
			continue
		}
		for _, n := range cand.NetworkInterfaces {
			if slices.Contains(n.PrivateIPs, ip) {
				z, _ := findZone(c.cfg.Zones, cand.Zone)
				return cloneInstance(cand), z, true
			}
		}
	}
	return Instance{}, Zone{}, false
}

// LocalInstance is the instance this host plays, with the launch-time
// block-device mapping IMDS reports; ok is false when there is none.
func (c *Cloud) LocalInstance() (in Instance, zone Zone, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.localLocked()
	if l == nil {
		return Instance{}, Zone{}, false
	}
	z, _ := findZone(c.cfg.Zones, l.Zone)
	return cloneInstance(l), z, true
}

// InstanceView is an instance as DescribeInstances shows it: the instance
// and its block-device mappings (every attachment, root first).
type InstanceView struct {
	Instance
	ZoneID       string
	BlockDevices []Attachment
}

// instanceAttachments lists the attachments of an instance, root first, then
// by device name.
func (c *Cloud) instanceAttachments(id string) []Attachment {
	return c.currentWorld().instanceAttachments(id)
}

// instanceAttachments lists the attachments of an instance in a world.
func (w world) instanceAttachments(id string) []Attachment {
	var out []Attachment
	for _, v := range w.volumes {
		for _, a := range v.Attachments {
			if a.InstanceID == id {
				out = append(out, *a)
			}
		}
	}
	slices.SortFunc(out, func(a, b Attachment) int {
		aRoot, bRoot := a.Device == rootDeviceName, b.Device == rootDeviceName
		if aRoot != bRoot {
			if aRoot {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Device, b.Device)
	})
	return out
}

// PrivateDNSName is the private host name EC2 gives an address: in
// us-east-1 ip-10-0-0-5.ec2.internal, elsewhere
// ip-10-0-0-5.<region>.compute.internal. Both the EC2 API and the IMDS
// report it, so it lives with the instances.
func PrivateDNSName(ip, region string) string {
	if ip == "" {
		return ""
	}
	host := "ip-" + strings.ReplaceAll(ip, ".", "-")
	if region == "us-east-1" {
		return host + ".ec2.internal"
	}
	return host + "." + region + ".compute.internal"
}
