package ec2api

import (
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

type instanceStateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

// stateReasonXML is EC2's stateReason: a code and its message.
type stateReasonXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

// stateReasonOut is the stateReason of an instance that left running for
// reason: a caller's request, or a failure of the machine.
func stateReasonOut(reason string) *stateReasonXML {
	if reason == "Server.InternalError" {
		return &stateReasonXML{Code: reason, Message: "Server.InternalError: Internal error on launch"}
	}
	return &stateReasonXML{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
}

type placementXML struct {
	AvailabilityZone   string `xml:"availabilityZone"`
	AvailabilityZoneID string `xml:"availabilityZoneId"`
	Tenancy            string `xml:"tenancy"`
}

type ebsDeviceXML struct {
	VolumeID            string `xml:"volumeId"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type blockDeviceXML struct {
	DeviceName string       `xml:"deviceName"`
	Ebs        ebsDeviceXML `xml:"ebs"`
}

type eniXML struct {
	NetworkInterfaceID string `xml:"networkInterfaceId"`
	SubnetID           string `xml:"subnetId"`
	VPCID              string `xml:"vpcId"`
	OwnerID            string `xml:"ownerId"`
	Status             string `xml:"status"`
	MACAddress         string `xml:"macAddress"`
	PrivateIPAddress   string `xml:"privateIpAddress"`
	PrivateDNSName     string `xml:"privateDnsName"`
	InterfaceType      string `xml:"interfaceType"`
	Attachment         struct {
		DeviceIndex int    `xml:"deviceIndex"`
		Status      string `xml:"status"`
	} `xml:"attachment"`
}

type instanceXML struct {
	InstanceID string           `xml:"instanceId"`
	ImageID    string           `xml:"imageId"`
	State      instanceStateXML `xml:"instanceState"`
	// StateTransitionReason says why and when the instance left running.
	StateTransitionReason string          `xml:"reason"`
	StateReason           *stateReasonXML `xml:"stateReason"`
	PrivateDNSName        string          `xml:"privateDnsName"`
	PrivateIPAddress      string          `xml:"privateIpAddress"`
	InstanceType          string          `xml:"instanceType"`
	LaunchTime            string          `xml:"launchTime"`
	Placement             placementXML    `xml:"placement"`
	SubnetID              string          `xml:"subnetId"`
	VPCID                 string          `xml:"vpcId"`
	Architecture          string          `xml:"architecture"`
	RootDeviceType        string          `xml:"rootDeviceType"`
	RootDeviceName        string          `xml:"rootDeviceName"`
	BlockDevices          struct {
		Items []blockDeviceXML `xml:"item"`
	} `xml:"blockDeviceMapping"`
	VirtualizationType string `xml:"virtualizationType"`
	Hypervisor         string `xml:"hypervisor"`
	NetworkInterfaces  struct {
		Items []eniXML `xml:"item"`
	} `xml:"networkInterfaceSet"`
	EbsOptimized bool    `xml:"ebsOptimized"`
	EnaSupport   bool    `xml:"enaSupport"`
	Tags         *tagSet `xml:"tagSet"`
}

func (h *handler) instanceOut(v model.InstanceView) instanceXML {
	out := instanceXML{
		InstanceID: v.ID, ImageID: v.ImageID, State: stateXML(v.StateValue()), StateTransitionReason: v.StateTransitionReason(),
		InstanceType: v.Type, LaunchTime: ts(v.LaunchTime),
		Placement:    placementXML{AvailabilityZone: v.Zone, AvailabilityZoneID: v.ZoneID, Tenancy: "default"},
		Architecture: "x86_64", RootDeviceType: "ebs", RootDeviceName: v.RootDevice,
		VirtualizationType: "hvm", Hypervisor: "xen", EbsOptimized: true, EnaSupport: true, Tags: tagsXML(v.Tags),
	}
	if v.StateReason != "" {
		out.StateReason = stateReasonOut(v.StateReason)
	}
	for _, a := range v.BlockDevices {
		out.BlockDevices.Items = append(out.BlockDevices.Items, blockDeviceXML{
			DeviceName: a.Device,
			Ebs:        ebsDeviceXML{VolumeID: a.VolumeID, Status: string(a.State), AttachTime: ts(a.AttachTime), DeleteOnTermination: a.DeleteOnTermination},
		})
	}
	for _, n := range v.NetworkInterfaces {
		e := eniXML{
			NetworkInterfaceID: n.ID, SubnetID: n.SubnetID, VPCID: n.VPCID, OwnerID: h.cloud.AccountID(), Status: "in-use",
			MACAddress: n.MAC, InterfaceType: "interface",
		}
		if len(n.PrivateIPs) > 0 {
			e.PrivateIPAddress = n.PrivateIPs[0]
			e.PrivateDNSName = model.PrivateDNSName(n.PrivateIPs[0], h.cloud.Region())
		}
		e.Attachment.DeviceIndex, e.Attachment.Status = n.DeviceNumber, "attached"
		out.NetworkInterfaces.Items = append(out.NetworkInterfaces.Items, e)
		if n.DeviceNumber == 0 {
			out.PrivateIPAddress, out.PrivateDNSName = e.PrivateIPAddress, e.PrivateDNSName
			out.SubnetID, out.VPCID = n.SubnetID, n.VPCID
		}
	}
	return out
}

type reservationXML struct {
	ReservationID string `xml:"reservationId"`
	OwnerID       string `xml:"ownerId"`
	Instances     struct {
		Items []instanceXML `xml:"item"`
	} `xml:"instancesSet"`
}

type describeInstancesResponse struct {
	header
	Reservations struct {
		Items []reservationXML `xml:"item"`
	} `xml:"reservationSet"`
	NextToken string `xml:"nextToken,omitempty"`
}

type diskXML struct {
	SizeInGB int64  `xml:"sizeInGB"`
	Count    int    `xml:"count"`
	Type     string `xml:"type"`
}

type instanceStorageXML struct {
	TotalSizeInGB int64 `xml:"totalSizeInGB"`
	Disks         struct {
		Items []diskXML `xml:"item"`
	} `xml:"disks"`
	NvmeSupport string `xml:"nvmeSupport"`
}

type instanceTypeXML struct {
	InstanceType      string `xml:"instanceType"`
	CurrentGeneration bool   `xml:"currentGeneration"`
	Hypervisor        string `xml:"hypervisor"`
	BareMetal         bool   `xml:"bareMetal"`
	VCPUInfo          struct {
		DefaultVCPUs int32 `xml:"defaultVCpus"`
	} `xml:"vCpuInfo"`
	MemoryInfo struct {
		SizeInMiB int64 `xml:"sizeInMiB"`
	} `xml:"memoryInfo"`
	InstanceStorageSupported bool                `xml:"instanceStorageSupported"`
	InstanceStorageInfo      *instanceStorageXML `xml:"instanceStorageInfo"`
	EbsInfo                  struct {
		EbsOptimizedSupport   string `xml:"ebsOptimizedSupport"`
		EncryptionSupport     string `xml:"encryptionSupport"`
		NvmeSupport           string `xml:"nvmeSupport"`
		MaximumEbsAttachments int    `xml:"maximumEbsAttachments"`
		AttachmentLimitType   string `xml:"attachmentLimitType,omitempty"`
	} `xml:"ebsInfo"`
	NetworkInfo struct {
		MaximumNetworkInterfaces int    `xml:"maximumNetworkInterfaces"`
		EnaSupport               string `xml:"enaSupport"`
	} `xml:"networkInfo"`
	VirtualizationTypes struct {
		Items []string `xml:"item"`
	} `xml:"supportedVirtualizationTypes"`
}

func instanceTypeOut(t model.InstanceType) instanceTypeXML {
	out := instanceTypeXML{InstanceType: t.Name, CurrentGeneration: true, Hypervisor: t.Hypervisor}
	out.VCPUInfo.DefaultVCPUs = t.VCPUs
	out.MemoryInfo.SizeInMiB = t.MemoryMiB
	out.EbsInfo.EbsOptimizedSupport, out.EbsInfo.EncryptionSupport = "default", "supported"
	out.EbsInfo.NvmeSupport = "unsupported"
	out.NetworkInfo.EnaSupport = "unsupported"
	if t.Nitro() {
		out.EbsInfo.NvmeSupport, out.NetworkInfo.EnaSupport = "required", "required"
	}
	out.EbsInfo.MaximumEbsAttachments = t.MaxAttachments
	out.EbsInfo.AttachmentLimitType = string(t.LimitType)
	out.NetworkInfo.MaximumNetworkInterfaces = t.MaxNetworkInterfaces
	out.VirtualizationTypes.Items = []string{"hvm"}
	if t.InstanceStoreNVMe > 0 {
		out.InstanceStorageSupported = true
		out.InstanceStorageInfo = &instanceStorageXML{TotalSizeInGB: t.InstanceStoreGB * int64(t.InstanceStoreNVMe), NvmeSupport: "required"}
		out.InstanceStorageInfo.Disks.Items = []diskXML{{SizeInGB: t.InstanceStoreGB, Count: t.InstanceStoreNVMe, Type: "ssd"}}
	}
	return out
}

type instanceTypesResponse struct {
	header
	Types struct {
		Items []instanceTypeXML `xml:"item"`
	} `xml:"instanceTypeSet"`
	NextToken string `xml:"nextToken,omitempty"`
}

type zoneXML struct {
	ZoneName           string `xml:"zoneName"`
	ZoneID             string `xml:"zoneId"`
	ZoneState          string `xml:"zoneState"`
	RegionName         string `xml:"regionName"`
	ZoneType           string `xml:"zoneType"`
	OptInStatus        string `xml:"optInStatus"`
	GroupName          string `xml:"groupName"`
	NetworkBorderGroup string `xml:"networkBorderGroup"`
	Messages           struct {
		Items []struct{} `xml:"item"`
	} `xml:"messageSet"`
}

type zonesResponse struct {
	header
	Zones struct {
		Items []zoneXML `xml:"item"`
	} `xml:"availabilityZoneInfo"`
}

func stateXML(s model.InstanceState) instanceStateXML {
	return instanceStateXML{Code: s.Code(), Name: string(s)}
}

type instanceStateChangeXML struct {
	InstanceID string           `xml:"instanceId"`
	Current    instanceStateXML `xml:"currentState"`
	Previous   instanceStateXML `xml:"previousState"`
}

// instanceStateChangesResponse answers StopInstances, StartInstances and
// TerminateInstances.
type instanceStateChangesResponse struct {
	header
	Instances struct {
		Items []instanceStateChangeXML `xml:"item"`
	} `xml:"instancesSet"`
}

type statusCheckXML struct {
	Status  string `xml:"status"`
	Details struct {
		Items []statusDetailXML `xml:"item"`
	} `xml:"details"`
}

// checkXML is one status check: its status and, when it applies, its
// reachability detail (with the time it began to fail).
func checkXML(status, reachability string, impairedSince time.Time) statusCheckXML {
	out := statusCheckXML{Status: status}
	if reachability != "" {
		d := statusDetailXML{Name: "reachability", Status: reachability}
		if reachability == model.CheckFailed {
			d.ImpairedSince = ts(impairedSince)
		}
		out.Details.Items = []statusDetailXML{d}
	}
	return out
}

type instanceStatusXML struct {
	InstanceID         string           `xml:"instanceId"`
	AvailabilityZone   string           `xml:"availabilityZone"`
	AvailabilityZoneID string           `xml:"availabilityZoneId"`
	State              instanceStateXML `xml:"instanceState"`
	SystemStatus       statusCheckXML   `xml:"systemStatus"`
	InstanceStatus     statusCheckXML   `xml:"instanceStatus"`
}

type instanceStatusResponse struct {
	header
	Statuses struct {
		Items []instanceStatusXML `xml:"item"`
	} `xml:"instanceStatusSet"`
	NextToken string `xml:"nextToken,omitempty"`
}
