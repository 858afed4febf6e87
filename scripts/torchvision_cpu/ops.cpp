// torchvision's operator library for a CPU torch where PyPI's torchvision wheel cannot load
// its own (Linux x86_64 wheels link CUDA torch). torchvision's Python side registers fake and
// meta kernels for these operators at import; it needs their schemas, and `_cuda_version`
// to answer. The detection and pooling ops themselves are not built: calling one raises
// torch's "no kernel for CPU" error. Image and video processors (Qwen-VL's among them) use
// torchvision's transforms, which are plain torch and need none of these.
#include <torch/library.h>

namespace {

int64_t cuda_version() { return -1; }  // torchvision's answer when built without CUDA

}  // namespace

TORCH_LIBRARY(torchvision, m) {
  m.def("_cuda_version", &cuda_version);
  m.def("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor");
  m.def("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor");
  m.def("box_iou_rotated(Tensor boxes1, Tensor boxes2) -> Tensor");
  m.def(
      "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
      "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor");
  m.def(
      "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt "
      "pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, "
      "SymInt width, int sampling_ratio, bool aligned) -> Tensor");
  m.def(
      "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, float "
      "rois_scale, int rois_zero_point, float spatial_scale, SymInt pooled_height, SymInt "
      "pooled_width, int sampling_ratio, bool aligned) -> Tensor");
  m.def(
      "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
      "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)");
  m.def(
      "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float "
      "spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio, SymInt "
      "batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor");
  m.def(
      "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt "
      "pooled_width) -> (Tensor, Tensor)");
  m.def(
      "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, SymInt "
      "pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, "
      "SymInt width) -> Tensor");
  m.def(
      "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
      "SymInt pooled_width) -> (Tensor, Tensor)");
  m.def(
      "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float "
      "spatial_scale, SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt "
      "channels, SymInt height, SymInt width) -> Tensor");
  m.def(
      "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
      "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
      "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor");
  m.def(
      "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, "
      "Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt "
      "pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, SymInt offset_groups, bool "
      "use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}
