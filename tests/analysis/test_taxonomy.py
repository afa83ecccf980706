"""The kernel taxonomy (tracekit/data/kernel_classes.json, analyzers/taxonomy): every example name of the table
classifies to its own entry, the name split, the dtype decoders on the names the issue lists, and the launching-op
table. The counter probe (samples/h200-counter-probe, each GEMM's dtype measured by the tensor-op counters) is the
truth for the GEMM rate classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.analyzers.flops import counted_flops
from tracekit.analyzers.readers.ncu.csv_export import read_ncu_csv
from tracekit.analyzers.taxonomy import CLASSES, classify_name, classify_op, load_table, split_name

PROBE = Path(__file__).resolve().parents[2] / "samples" / "h200-counter-probe" / "raw" / "ncu_details.csv"


def test_every_example_of_the_table_classifies_to_its_own_entry() -> None:
    table = load_table()
    assert tuple(table.classes) == CLASSES
    missed = [
        (f.family, classify_name(ex).family, ex[:80])
        for f in table.families
        for ex in f.examples
        if classify_name(ex).family != f.family
    ]
    assert not missed
    assert sum(len(f.examples) for f in table.families) >= 60
    assert all(f.source for f in table.families), "every entry says where its pattern came from"


def test_the_name_split_keeps_namespaces_and_drops_return_types_templates_and_parameters() -> None:
    assert split_name(
        "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float>(cublasGemvParams)"
    ) == ("internal::gemvx::kernel", "int, int, float, float")
    assert split_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, 1>(float*)")[0] == (
        "at::native::anon::CatArrayBatchedCopy"
    )
    fn, args = split_name(
        "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
        "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)"
    )
    assert (fn, args) == ("vllm::fused_add_rms_norm_kernel", "c10::BFloat16, 8")
    # Nsight Compute's CSV export writes the NVTX range before the name
    assert split_name("probe_bf16_M16_N2048_K6144/nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_TNT")[0] == (
        "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_TNT"
    )
    assert split_name("Memcpy HtoD (Pageable -> Device)")[0] == "Memcpy HtoD"


@pytest.mark.parametrize(
    ("name", "cls", "dtype"),
    [
        ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "gemm", "bf16"),
        ("nvjet_sm90_hsh_320x128_64x3_1x2_h_bz_coopB_TNT", "gemm", "fp16"),
        ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT", "gemm", "fp8"),
        ("nvjet_sm100_ootst_128x128_256x7_4x1_2cta_v_bx_Avec16UE4M3_Bvec16UE4M3_TNT", "gemm", "fp4"),
        ("nvjet_sss_tf32_128x256_TNT", "gemm", "tf32"),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align1>(Params)",
            "gemm",
            "tf32",
        ),
        (
            "void Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x3_tn_align8>(Params)",
            "gemm",
            "bf16",
        ),
        ("void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_128x128_nn_align1>(Params)", "gemm", "fp16"),
        ("ampere_h16816gemm_256x128_ldg8_stages_64x3_nn", "gemm", "fp16"),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_i16832gemm_s8_128x128_64x3_tn_align16>(Params)",
            "gemm",
            "int8",
        ),
        (
            "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_execute_kernel__5x_cublas",
            "gemm",
            "tf32",
        ),
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_execute_kernel__5x_cublas",
            "gemm",
            "fp32",
        ),
        (
            "cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_128x128x128_1x1x1_0_tnn_align16",
            "gemm",
            "fp8",
        ),
        (
            "void cutlass::device_kernel<GemmUniversal<CollectiveMma<cutlass::float_e2m1_t, cutlass::float_e2m1_t>>>(P)",
            "gemm",
            "fp4",
        ),
        (
            "void cutlass::device_kernel<GemmUniversal<CollectiveMma<cutlass::half_t, cutlass::half_t>>>(P)",
            "gemm",
            "fp16",
        ),
        (
            "void cutlass::device_kernel<GemmUniversal<CollectiveMma<cutlass::tfloat32_t, cutlass::tfloat32_t>>>(P)",
            "gemm",
            "tf32",
        ),
        (
            "Gemm_Bfloat16_E2m1E2m1_Fp32_t128x128x128_s3_et128x128_m128x128x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
            "gemm",
            "fp4",
        ),
        (
            "bmm_Bfloat16_E4m3E4m3_Fp32_t128x16x128u2_s6_et64x16_m64x16x32_c1x1x1_rM_TN_transOut_noShfl_dsFp8_sm100f",
            "gemm",
            "fp8",
        ),
        (
            "void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
            "cublasGemvTensorStridedBatched<float> > >(cublasDotParams<cublasGemvTensorStridedBatched<float> >)",
            "gemm",
            "bf16",
        ),
        (
            "void deep_gemm::sm100_fp8_fp4_gemm_1d1d_impl<(cute::UMMA::Major)0, (cute::UMMA::Major)0, 128u>(int)",
            "gemm",
            "fp8",
        ),
    ],
)
def test_rate_class_from_gemm_names(name: str, cls: str, dtype: str) -> None:
    info = classify_name(name)
    assert (info.kernel_class, info.dtype_class) == (cls, dtype), info


@pytest.mark.parametrize(
    ("name", "cls", "family"),
    [
        # matched on "cutlass" by the old regexes: FlashAttention 3 through CUTLASS's device_kernel
        (
            "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
            "CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>, 128, "
            "cutlass::bfloat16_t, float>>>>(flash::FlashAttnFwdSm90::Params)",
            "attention",
            "flash-attention-3",
        ),
        (
            "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
            "attention",
            "trtllm-fmha",
        ),
        # "gemm" inside "fbgemm" is the library's name
        (
            "void fbgemm_gpu::_offsets_range_cuda_kernel<long>(long, long, long const*, long*)",
            "layout",
            "fbgemm-sparse",
        ),
        (
            "void fbgemm_gpu::_block_bucketize_sparse_features_cuda_kernel1<int, int>(int, int, int const*, int*)",
            "layout",
            "fbgemm-sparse",
        ),
        (
            "void fbgemm_gpu::permute_2D_data_kernel<true, int, int, float>(int, int, int, int const*, float*)",
            "layout",
            "fbgemm-sparse",
        ),
        (
            "void bounds_check_indices_kernel<long, false>(at::GenericPackedTensorAccessor<long, 1ul>)",
            "layout",
            "fbgemm-sparse",
        ),
        # PyTorch's SiLU through gpu_kernel_impl_nocast and a MulFunctor: not "cast", not quantize
        (
            "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<"
            "at::native::silu_kernel(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::"
            "[lambda(c10::BFloat16) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) "
            "(instance 1)]>(int, T3)",
            "activation",
            "torch-activation",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<c10::BFloat16, "
            "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, std::array<char *, "
            "(unsigned long)3>>(int, T2, T3)",
            "elementwise",
            "torch-elementwise",
        ),
        (
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(P)",
            "splitk-reduce",
            "cublas-splitk-reduce",
        ),
        ("volta_scudnn_128x64_relu_interior_nn_v1", "convolution", "cudnn-conv"),
        (
            "void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4, void "
            "at::native::templates::cuda::uniform_and_transform<float>>(long, at::PhiloxCudaState, T3, T4)",
            "rng",
            "torch-distribution",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", "nccl"),
        (
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, int)",
            "communication",
            "vllm-custom-allreduce",
        ),
        ("Memset (Device)", "memory", "cuda-memset"),
    ],
)
def test_kernels_the_issue_names(name: str, cls: str, family: str) -> None:
    info = classify_name(name)
    assert (info.kernel_class, info.family) == (cls, family), info
    assert cls == "gemm" or info.dtype_class is None


@pytest.mark.parametrize(
    ("name", "cls", "family"),
    [
        # Inductor's GEMM templates are named for their fused ops, which other families select by word
        ("triton_tem_fused__unsafe_view_mm_mul_silu_t_view_6", "gemm", "triton-template-mm"),
        ("triton_tem_fused_mm_t_transpose_view_2", "gemm", "triton-template-mm"),
        ("triton_tem_fused__to_copy_add_mean_mm_mul_pow_rsqrt_t_view_1", "gemm", "triton-template-mm"),
        ("triton_tem_fused_addmm_relu_3", "gemm", "triton-template-mm"),
        ("triton_tem_fused_baddbmm_2", "gemm", "triton-template-mm"),
        ("triton_tem_fused__scaled_mm_0", "gemm", "triton-template-mm"),
        # Triton's own matmul kernels, persistent ones included
        ("matmul_kernel", "gemm", "triton-matmul"),
        ("_matmul_persistent", "gemm", "triton-matmul"),
        ("matmul_kernel_tma_persistent", "gemm", "triton-matmul"),
        ("matmul_kernel_descriptor_persistent", "gemm", "triton-matmul"),
        # pointwise / reduction kernels that name a GEMM op among their fused ops are not GEMMs
        ("triton_poi_fused_addmm_gelu_1", "activation", "triton-activation"),
        ("triton_per_fused_mm_0", "reduction", "triton-reduction"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "normalization", "triton-norm"),
        ("triton_poi_fused_mul_silu_0", "activation", "triton-activation"),
        # templates without mm / bmm / addmm among their ops
        ("triton_tem_fused_flex_attention_0", "attention", "named-attention"),
        ("triton_tem_fused_convolution_0", "convolution", "triton-template-conv"),
        ("triton_tem_fused_0", "other", None),
        # softmax outside a fused attention
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
            "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
            "softmax",
            "softmax",
        ),
        (
            "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_"
            "warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn",
            "convolution",
            "cudnn-xmma-conv",
        ),
    ],
)
def test_triton_gemms_convolutions_and_softmax_by_name(name: str, cls: str, family: str | None) -> None:
    info = classify_name(name)
    assert (info.kernel_class, info.family) == (cls, family), info


def test_unknown_names_are_other_with_no_family() -> None:
    for name in (
        "_mm",
        "triton__0d1d2d",
        "void warptiling<128, 128>(int, int, int, float*, float*, float*)",
        "",
        None,
    ):
        info = classify_name(name)
        assert (info.kernel_class, info.family, info.known) == ("other", None, False)


def test_launching_op_table() -> None:
    assert classify_op("aten::silu") == "activation"
    assert classify_op("aten::silu, seq = 3, op_id = 7") == "activation"  # emit_nvtx's counters
    assert classify_op("aten::gelu_backward") == "activation"
    assert classify_op("aten::layer_norm") == classify_op("aten::rms_norm") == "normalization"
    assert classify_op("nccl:all_reduce") == classify_op("c10d::allreduce_") == "communication"
    assert classify_op("_C::scaled_fp8_quant") == "quantize"
    assert classify_op("aten::mul") == "elementwise"
    assert classify_op("aten::_softmax") == classify_op("aten::_log_softmax") == "softmax"
    assert (
        classify_op("aten::cudnn_convolution") == classify_op("aten::convolution_backward") == "convolution"
    )
    assert classify_op("aten::_scaled_dot_product_attention_math") == "attention"
    assert (
        classify_op("aten::mm") is None and classify_op("aten::addmm") is None and classify_op(None) is None
    )


def test_counter_probe_dtypes_match_the_name_table() -> None:
    """Every kernel of the H200 counter probe: the 16 GEMM names' rate class as the tensor-op (or FFMA)
    counters measured it, and the split-K reduce kernels beside them."""
    frames = read_ncu_csv(PROBE).frames
    metrics: dict[int, dict[str, float | None]] = {}
    for r in frames["ncu_metrics"].iter_rows(named=True):
        metrics.setdefault(r["ncu_id"], {})[r["metric"]] = r["value"]
    gemms: dict[str, str] = {}
    for r in frames["ncu"].iter_rows(named=True):
        name = r["demangled_name"]
        info = classify_name(name)
        counted = counted_flops(metrics[r["ncu_id"]], name)
        if info.kernel_class == "gemm":
            assert counted is not None and counted.dtype_class == info.dtype_class, (name, counted, info)
            gemms[name] = info.dtype_class  # type: ignore[assignment]
        else:
            assert info.kernel_class == "splitk-reduce", name
            assert counted is None or counted.simt, name  # no tensor math
    assert len(gemms) == 16
    assert sorted(set(gemms.values())) == ["bf16", "fp32", "fp8", "tf32"]


def test_docs_name_every_family_class_and_decoder() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "KERNELS.md").read_text()
    table = load_table()
    assert all(f"`{f.family}`" in doc for f in table.families)
    assert all(f"`{c}`" in doc for c in CLASSES)
    assert all(
        f"| `{d}` |" in doc for d in ("nvjet", "xmma", "mnemonic", "trtllm", "tensile", "cublas", "types")
    )
