package volumehealth

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/diskplane/diskplane/pkg/health"
)

// legacyStatsResponse describes NodeGetVolumeStatsResponse as CSI 1.12
// defines it (usage = 1, volume_condition = 2), the shape the kubelet
// decodes; the test reads Diskplane's answers with it, independently of
// this package's own decoder.
func legacyStatsResponse(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("legacy_csi.proto"),
		Package: proto.String("legacy.csi.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("VolumeCondition"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("abnormal"), Number: proto.Int32(1), Label: &opt, Type: descriptorpb.FieldDescriptorProto_TYPE_BOOL.Enum(), JsonName: proto.String("abnormal")},
				{Name: proto.String("message"), Number: proto.Int32(2), Label: &opt, Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), JsonName: proto.String("message")},
			}},
			{Name: proto.String("NodeGetVolumeStatsResponse"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("volume_condition"), Number: proto.Int32(2), Label: &opt, Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(),
					TypeName: proto.String(".legacy.csi.v1.VolumeCondition"), JsonName: proto.String("volumeCondition")},
			}},
		},
	}
	fd, err := protodesc.NewFile(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("NodeGetVolumeStatsResponse")
}

func TestConditionOnTheWire(t *testing.T) {
	var sick health.Report
	sick.Add(health.Inaccessible, "DeviceGone", "the device is gone")
	tests := []struct {
		name         string
		report       health.Report
		wantAbnormal bool
		wantMessage  string
	}{
		{name: "healthy", report: health.Report{Notes: []string{"device nvme1n1"}}, wantMessage: "healthy; device nvme1n1"},
		{name: "abnormal", report: sick, wantAbnormal: true, wantMessage: "the device is gone"},
	}
	desc := legacyStatsResponse(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: 10}}}
			SetCondition(resp, health.Report{Notes: []string{"replaced"}})
			SetCondition(resp, tc.report)
			wire, err := proto.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}

			legacy := dynamicpb.NewMessage(desc)
			if err := proto.Unmarshal(wire, legacy); err != nil {
				t.Fatal(err)
			}
			cond := legacy.Get(desc.Fields().ByName("volume_condition")).Message()
			fields := cond.Descriptor().Fields()
			if got := cond.Get(fields.ByName("abnormal")).Bool(); got != tc.wantAbnormal {
				t.Errorf("a CSI 1.12 reader sees abnormal %v, want %v", got, tc.wantAbnormal)
			}
			if got := cond.Get(fields.ByName("message")).String(); got != tc.wantMessage {
				t.Errorf("a CSI 1.12 reader sees message %q, want %q", got, tc.wantMessage)
			}

			var back csi.NodeGetVolumeStatsResponse
			if err := proto.Unmarshal(wire, &back); err != nil {
				t.Fatal(err)
			}
			if len(back.Usage) != 1 || back.Usage[0].Total != 10 {
				t.Errorf("usage after the round trip: %v", back.Usage)
			}
			abnormal, message, ok := Condition(&back)
			if !ok || abnormal != tc.wantAbnormal || message != tc.wantMessage {
				t.Errorf("Condition = %v, %q, %v; want %v, %q", abnormal, message, ok, tc.wantAbnormal, tc.wantMessage)
			}
		})
	}
	if _, _, ok := Condition(&csi.NodeGetVolumeStatsResponse{}); ok {
		t.Error("Condition of a response without one reports one")
	}
}

func TestVolumeHealth(t *testing.T) {
	var r health.Report
	r.Add(health.Degraded, "FilesystemErrors", "errors")
	r.Add(health.Inaccessible, "DeviceGone", "gone")
	r.Add(health.DataLoss, "VolumeError", "lost")
	r.Note("not an entry")
	got := VolumeHealth("vol-1", r)
	want := []struct {
		status csi.VolumeHealthErrorType
		reason string
	}{{csi.VolumeHealthErrorType_DEGRADED, "FilesystemErrors"}, {csi.VolumeHealthErrorType_INACCESSIBLE, "DeviceGone"}, {csi.VolumeHealthErrorType_DATA_LOSS, "VolumeError"}}
	if got.VolumeId != "vol-1" || len(got.HealthStatuses) != len(want) {
		t.Fatalf("VolumeHealth = %v", got)
	}
	for i, w := range want {
		if e := got.HealthStatuses[i]; e.Status != w.status || e.Reason != w.reason || e.Message == "" {
			t.Errorf("entry %d = %v, want %v %s", i, e, w.status, w.reason)
		}
	}
	if h := VolumeHealth("vol-2", health.Report{}); len(h.HealthStatuses) != 0 {
		t.Errorf("a healthy volume has entries: %v", h)
	}
}
